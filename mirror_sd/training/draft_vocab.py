"""Build a proposal vocabulary (draft_vocab.py) for a tokenizer, from text that exists offline.

    python -m mirror_sd.training.draft_vocab --tokenizer default --size 65536 --base 57344 \
        --out assets/draft_vocab_qwen2.5-coder.safetensors  (pip install wordfreq first)

1) corpus, split into documents (every 10th held out, seeded):
   - code: Python standard-library sources;
   - prose: pydoc_data's topic texts, and the same texts as chat answers (the tokenizer's
     chat template: its scaffolding tokens are counted too);
   - markdown: the .md files on this machine (/usr/share/doc, site-packages): English prose
     with code fences, lists and emphasis, the shape of a chat answer;
   - words: word frequencies of large corpora (the `wordfreq` package, when installed:
     `pip install wordfreq`): each frequent word, as it appears mid-sentence (" word"),
     capitalised and at a line start, counted by its frequency; English and --languages;
   - languages: the translated messages of /usr/share/locale (.mo catalogs) for the languages
     chat users write most (--languages), when the machine has them.
2) count token frequencies per source on the training documents; a token's score is its
   share of its source's tokens, mixed by --weights (one per source, in the order above).
3) keep: every special/added token (end of turn, chat scaffolding), the first --base ids
   (byte-level BPE ids follow merge order, so low ids are the common merges of the tokenizer's
   own training text, whatever the language), then the highest scores, then the lowest ids
   left, to --size ids in all.
4) report, on the held-out documents: the share of tokens inside the set, per source, at the
   chosen size and at a few others (in the file's metadata and printed).
"""
from __future__ import annotations

import argparse
import gettext
import json
import random
import shlex
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

import torch

from mirror_sd.proposals.draft_vocab import save, tokenizer_fingerprint
from mirror_sd.training.streams import stdlib_sources

LANGUAGES = "de,fr,es,it,pt_BR,nl,pl,ru,zh_CN,ja,ko,tr,sv,cs"
SOURCES = ("code", "prose", "markdown", "words", "languages")
WEIGHTS = "0.3,0.1,0.2,0.3,0.1"


def code_documents(max_bytes: int) -> list[str]:
    docs, total = [], 0
    for path in stdlib_sources():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        docs.append(text[:60_000])  # a cap per file: no single module dominates
        total += len(docs[-1])
        if total >= max_bytes:
            break
    return docs


def prose_documents(tokenizer) -> list[str]:
    from pydoc_data.topics import topics
    docs = [topics[k] for k in sorted(topics)]
    chats = []
    for name, text in zip(sorted(topics), docs):
        msgs = [{"role": "user", "content": f"Explain {name.replace('-', ' ')} in Python."},
                {"role": "assistant", "content": text[:3000]}]
        try:
            chats.append(tokenizer.apply_chat_template(msgs, tokenize=False))
        except Exception:  # no chat template: the raw texts are enough
            break
    return docs + chats


def markdown_documents(max_bytes: int) -> list[str]:
    roots = [Path("/usr/share/doc"), Path(sysconfig.get_paths()["purelib"])]
    docs, total = [], 0
    for root in roots:
        for path in sorted(root.rglob("*.md")) if root.is_dir() else []:
            try:
                text = path.read_text(encoding="utf-8")[:40_000]
            except (UnicodeDecodeError, OSError):
                continue
            docs.append(text)
            total += len(text)
            if total >= max_bytes:
                return docs
    return docs


def word_counts(tokenizer, languages: str, english: int, per_language: int) -> Counter:
    """Token counts implied by word frequencies (wordfreq), or nothing when it is missing."""
    try:
        import wordfreq
    except ImportError:
        return Counter()
    c = Counter()
    wanted = [("en", english)] + [(lang.split("_")[0], per_language)
                                  for lang in filter(None, languages.split(","))]
    known = wordfreq.available_languages()
    for lang, n in wanted:
        if lang not in known:
            continue
        freqs = wordfreq.get_frequency_dict(lang)
        words = sorted(freqs, key=freqs.get, reverse=True)[:n]
        spaced = lang not in ("zh", "ja")
        forms = ((" {}", 0.75), (" {}", 0.15), ("{}", 0.05), ("{}", 0.05)) if spaced else (("{}", 1.0),)
        texts, weights = [], []
        for w in words:
            f = freqs[w] * (1.0 if lang == "en" else 0.5)
            for i, (form, share) in enumerate(forms):
                texts.append(form.format(w.capitalize() if i in (1, 3) else w))
                weights.append(f * share)
        for ids, wt in zip(tokenizer(texts, add_special_tokens=False)["input_ids"], weights):
            for t in ids:
                c[t] += wt
    total = sum(c.values()) or 1.0
    return Counter({t: v / total * 1e7 for t, v in c.items()})  # a pseudo-count scale


def language_documents(languages: str, max_per_language: int) -> list[str]:
    docs = []
    for lang in filter(None, languages.split(",")):
        folder = Path("/usr/share/locale") / lang / "LC_MESSAGES"
        texts, total = [], 0
        for path in sorted(folder.glob("*.mo")) if folder.is_dir() else []:
            try:
                with open(path, "rb") as f:
                    catalog = gettext.GNUTranslations(f)._catalog
            except (OSError, UnicodeDecodeError, ValueError, KeyError):
                continue
            body = "\n".join(v for k, v in catalog.items() if k and isinstance(v, str))
            texts.append(body)
            total += len(body)
            if total >= max_per_language:
                break
        docs.extend(texts)
    return docs


def split(docs: list[str], rng: random.Random) -> tuple[list[str], list[str]]:
    order = list(range(len(docs)))
    rng.shuffle(order)
    held = set(order[::10])
    return [d for i, d in enumerate(docs) if i not in held], [d for i, d in enumerate(docs) if i in held]


def count(tokenizer, docs: list[str]) -> Counter:
    c = Counter()
    for i in range(0, len(docs), 64):
        for ids in tokenizer(docs[i:i + 64], add_special_tokens=False)["input_ids"]:
            c.update(ids)
    return c


def choose(counts: dict[str, Counter], weights: dict[str, float], specials: list[int],
           vocab_size: int, size: int, base: int) -> torch.Tensor:
    score = Counter()
    for src, c in counts.items():
        total = sum(c.values()) or 1
        for t, n in c.items():
            score[t] += weights[src] * n / total
    keep = dict.fromkeys(t for t in specials if 0 <= t < vocab_size)
    # then the low ids, the best scores and the low ids left, each only while there is room
    ranked = (range(min(base, vocab_size)), (t for t, _ in score.most_common() if t < vocab_size),
              range(vocab_size))
    for source in ranked:
        for t in source:
            if len(keep) >= size:
                break
            keep.setdefault(t)
    return torch.tensor(sorted(keep), dtype=torch.int64)


def coverage(ids: torch.Tensor, counts: Counter) -> float:
    inside = set(ids.tolist())
    total = sum(counts.values())
    return sum(n for t, n in counts.items() if t in inside) / total if total else float("nan")


def load_tokenizer(name: str):
    """(tokenizer, where it came from): 'default' is the bundled pair's target's."""
    from mirror_sd.models.loading import load_model
    loaded = load_model(name, "target", weights=False)
    return loaded.tokenizer, (loaded.source.path if name == "default" else name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mirror_sd.training.draft_vocab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", default="default",
                   help="'default' (the bundled pair's) or a local model/tokenizer folder")
    p.add_argument("--size", type=int, default=65536, help="ids kept")
    p.add_argument("--base", type=int, default=57344, help="the first BASE ids are always kept")
    p.add_argument("--weights", default=WEIGHTS, help=",".join(SOURCES))
    p.add_argument("--languages", default=LANGUAGES, help="locale folders under /usr/share/locale")
    p.add_argument("--code-bytes", type=int, default=12_000_000)
    p.add_argument("--language-bytes", type=int, default=400_000, help="per language")
    p.add_argument("--markdown-bytes", type=int, default=6_000_000)
    p.add_argument("--english-words", type=int, default=60_000)
    p.add_argument("--words-per-language", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    tokenizer, tok_path = load_tokenizer(a.tokenizer)
    vocab_size = len(tokenizer)
    if not 1 <= a.size <= vocab_size:
        print(f"--size must be between 1 and the vocabulary's {vocab_size} ids", file=sys.stderr)
        return 2
    weights = dict(zip(SOURCES, (float(w) for w in a.weights.split(","))))
    rng = random.Random(a.seed)
    docs = {"code": code_documents(a.code_bytes), "prose": prose_documents(tokenizer),
            "markdown": markdown_documents(a.markdown_bytes),
            "languages": language_documents(a.languages, a.language_bytes)}
    train, held = {}, {}
    for src, d in docs.items():
        tr, ho = split(d, rng)
        train[src], held[src] = count(tokenizer, tr), count(tokenizer, ho)
        print(f"{src}: {len(d)} documents, {sum(train[src].values())} training tokens, "
              f"{sum(held[src].values())} held out", flush=True)
    train["words"] = word_counts(tokenizer, a.languages, a.english_words, a.words_per_language)
    print(f"words: {len(train['words'])} distinct tokens"
          + ("" if train["words"] else " (wordfreq is not installed: skipped)"), flush=True)
    train = {s: c for s, c in train.items() if c}
    specials = sorted(set(tokenizer.all_special_ids) |
                      {i for t, i in tokenizer.get_added_vocab().items()})
    ids = choose(train, weights, specials, vocab_size, a.size, a.base)
    report = {"size": a.size, "coverage": {s: round(coverage(ids, c), 4) for s, c in held.items() if c},
              "by_size": {}}
    for size in sorted({8192, 16384, 24576, 32768, 49152} - {a.size}):
        if size < vocab_size:
            other = choose(train, weights, specials, vocab_size, size, min(a.base, size))
            report["by_size"][size] = {s: round(coverage(other, c), 4) for s, c in held.items() if c}
    report["held_out_tokens"] = {s: sum(c.values()) for s, c in held.items()}
    report["seconds"] = round(time.perf_counter() - t0, 1)
    meta = {"vocab_size": vocab_size, "fingerprint": tokenizer_fingerprint(tokenizer),
            "tokenizer": tok_path, "size": str(len(ids)),
            "command": "python -m mirror_sd.training.draft_vocab " + shlex.join(argv if argv is not None else sys.argv[1:]),
            "report": report}
    save(Path(a.out), ids, meta)
    print(json.dumps(report, indent=1))
    print(f"wrote {a.out}: {len(ids)} of {vocab_size} ids")
    return 0


if __name__ == "__main__":
    sys.exit(main())
