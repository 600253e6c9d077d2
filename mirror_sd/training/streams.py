"""Train stream heads (streams.py) for a draft, offline, on the CPU.

    python -m mirror_sd.training.streams --draft default --out assets/streams-<draft>.pt

1) prompts from text that exists offline: chat requests built from the Python standard
   library (a function's signature and the first line of its docstring; pydoc topic names)
   and raw source chunks to continue;
2) the draft's own greedy continuations of them, batched, keeping its final hidden states
   (self-distillation: head j learns the token the draft itself writes j+1 steps later);
3) the heads are fitted with the draft's LM head frozen; the softmax runs over the tokens
   seen in the targets (a restricted vocabulary: 10-20x cheaper than all 151,936 rows);
4) a held-out report per stream position, with the full LM head: how often head j's top-1
   equals the draft's own token j+1 steps ahead (and how often heads 1..j all do).
"""
from __future__ import annotations

import argparse
import ast
import copy
import random
import shlex
import sys
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from mirror_sd.errors import MirrorSDError
from mirror_sd.placement import set_process_threads
from mirror_sd.proposals.streams import StreamHeads, draft_key, heads_path


# ---------------------------------------------------------------------------------------------
# 1) prompts

def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_sources() -> list[Path]:
    """The standard library's modules and packages' modules, tests left out, in a fixed order."""
    return sorted(stdlib_dir().glob("*.py")) + sorted(p for p in stdlib_dir().glob("*/*.py")
                                                      if "test" not in p.parts[-2])


def function_requests(files: list[Path], rng: random.Random, limit: int) -> list[str]:
    """'Write a Python function `name(args)` that <docstring line>.' from stdlib sources."""
    out = []
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                doc = (ast.get_docstring(node) or "").strip().split("\n")[0].strip().rstrip(".")
                if 20 <= len(doc) <= 160:
                    args = ", ".join(a.arg for a in node.args.args if a.arg != "self")
                    out.append(f"Write a Python function `{node.name}({args})` that does this: "
                               f"{doc[0].lower() + doc[1:]}. Include a short docstring and an example.")
        if len(out) >= 4 * limit:
            break
    rng.shuffle(out)
    return out[:limit]


def topic_requests(rng: random.Random, limit: int) -> list[str]:
    """Questions about Python's documented topics (pydoc_data/topics.py)."""
    from pydoc_data.topics import topics
    names = sorted(topics)
    rng.shuffle(names)
    forms = ["Explain {} in Python with a short example.", "What does the Python documentation say about {}? Summarize it.",
             "Give a short tutorial on {} in Python."]
    return [rng.choice(forms).format(n.replace("-", " ")) for n in names[:limit]]


def source_chunks(files: list[Path], tokenizer, rng: random.Random, limit: int, length: int) -> list[list[int]]:
    """Raw chunks of `length` tokens of stdlib source, to be continued as plain text."""
    out = []
    for path in files:
        try:
            ids = tokenizer(path.read_text(encoding="utf-8"))["input_ids"]
        except (UnicodeDecodeError, ValueError):
            continue
        if len(ids) > length + 64:
            start = rng.randrange(0, len(ids) - length - 64)
            out.append(ids[start:start + length])
        if len(out) >= limit:
            break
    return out


def build_prompts(tokenizer, n: int, seed: int) -> list[list[int]]:
    """n prompt id lists: 1/2 function requests, 1/6 topic questions (chat), 1/3 raw source."""
    rng = random.Random(seed)
    files = stdlib_sources()
    rng.shuffle(files)
    chats = function_requests(files, rng, n // 2) + topic_requests(rng, n // 6)

    def chat(text):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    prompts = [chat(t) for t in chats]
    prompts += source_chunks(files[::-1], tokenizer, rng, n - len(prompts), 64)
    rng.shuffle(prompts)
    return prompts


# ---------------------------------------------------------------------------------------------
# 2) the draft's own continuations

@torch.inference_mode()
def continuations(model, prompts: list[list[int]], new_tokens: int, pad_id: int, eos_ids: set[int]):
    """Greedy continuations, batched (left padding). Returns per prompt (h [M, H] float32:
    final hidden state at the prompt's last token and the first M-1 generated ones, tokens [M]:
    the generated tokens). Row t of h scores tokens[t]."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False,
                         output_hidden_states=True, return_dict_in_generate=True,
                         pad_token_id=pad_id, temperature=None, top_p=None, top_k=None)
    gen = out.sequences[:, width:]  # [B, M]
    h = torch.stack([step[-1][:, -1] for step in out.hidden_states], 1)  # [B, M, H], final-normed
    result = []
    for i in range(len(prompts)):
        tokens = gen[i].tolist()
        end = next((k + 1 for k, t in enumerate(tokens) if t in eos_ids), len(tokens))
        result.append((h[i, :end].float().clone(), gen[i, :end].clone()))
    return result


def text_chunks(tokenizer, n_tokens: int, length: int, seed: int) -> list[list[int]]:
    """Chunks of `length` tokens, about n_tokens in all: 3/4 stdlib source, 1/4 pydoc prose."""
    from pydoc_data.topics import topics
    rng = random.Random(seed)
    files = stdlib_sources()
    rng.shuffle(files)
    n = max(2, n_tokens // length)
    code = source_chunks(files, tokenizer, rng, n - n // 4, length)
    prose_ids = tokenizer("\n\n".join(topics[k] for k in sorted(topics)))["input_ids"]
    starts = sorted(rng.sample(range(0, len(prose_ids) - length), n // 4))
    chunks = code + [prose_ids[s:s + length] for s in starts]
    rng.shuffle(chunks)
    return chunks


@torch.inference_mode()
def teacher_forced(model, chunks: list[list[int]], batch: int = 2, progress: bool = True):
    """One forward over each chunk of real text: per chunk (h [T, H] float32, own [T]: the
    draft's own argmax choice after each position, given the text so far). Same layout as
    continuations(): row t of h scores own[t], so head j's target is own[t+j]."""
    from tqdm import tqdm
    base = getattr(model, model.base_model_prefix)
    lm_head = model.get_output_embeddings()
    out = []
    for i in tqdm(range(0, len(chunks), batch), desc="draft forwards over text", file=sys.stderr,
                  disable=not progress):
        ids = torch.tensor(chunks[i:i + batch])  # [b, T] (equal lengths)
        h = base(input_ids=ids).last_hidden_state  # [b, T, H], final-normed
        for row in h:
            own = torch.cat([lm_head(row[k:k + 128]).argmax(-1) for k in range(0, len(row), 128)])
            out.append((row.float().clone(), own))
    return out


def later_tokens(tokens: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[M, K]: the token j+1 steps after each row's own token (column j-1), -1 past the end."""
    m = len(tokens)
    tgt = torch.full((m, n_heads), -1, dtype=torch.long)
    for j in range(1, n_heads + 1):
        if m > j:
            tgt[:m - j, j - 1] = tokens[j:]
    return tgt


def stream_targets(sequences, n_heads: int):
    """(h [N, H], targets [N, K]: later_tokens of every sequence) from continuations()."""
    return (torch.cat([h for h, _ in sequences]),
            torch.cat([later_tokens(tokens, n_heads) for _, tokens in sequences]))


# ---------------------------------------------------------------------------------------------
# 3) fitting

def fit(heads: StreamHeads, lm_weight: torch.Tensor, h: torch.Tensor, targets: torch.Tensor, *,
        epochs: int = 4, batch: int = 256, lr: float = 2e-3, weight_decay: float = 0.01,
        seed: int = 0, progress: bool = True, max_seconds: float | None = None) -> list[float]:
    """Cross-entropy of each head against its targets, the softmax restricted to the tokens that
    occur in `targets` (the LM head stays frozen). Returns the mean loss per epoch."""
    from tqdm import tqdm

    vocab = torch.unique(targets[targets >= 0])  # [S]
    w = lm_weight[vocab].detach().to(h.dtype)  # [S, H]
    remap = torch.full((lm_weight.shape[0],), -1, dtype=torch.long)
    remap[vocab] = torch.arange(len(vocab))
    local = torch.where(targets >= 0, remap[targets.clamp(min=0)], -1)  # [N, K]
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, weight_decay=weight_decay)
    g = torch.Generator().manual_seed(seed)
    steps = epochs * ((len(h) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    losses, t0 = [], time.monotonic()
    bar = tqdm(total=steps, desc="fitting heads", disable=not progress, file=sys.stderr)
    for _ in range(epochs):
        order = torch.randperm(len(h), generator=g)
        total, count = 0.0, 0
        for i in range(0, len(h), batch):
            idx = order[i:i + batch]
            logits = heads(h[idx]) @ w.T  # [b, K, S]
            loss = F.cross_entropy(logits.reshape(-1, len(vocab)), local[idx].reshape(-1), ignore_index=-1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            value = loss.item()
            total, count = total + value * len(idx), count + len(idx)
            bar.update(1)
            bar.set_postfix(loss=f"{value:.3f}")
        losses.append(total / count)
        if max_seconds is not None and time.monotonic() - t0 > max_seconds:
            break
    bar.close()
    return losses


# ---------------------------------------------------------------------------------------------
# 4) held-out report

@torch.no_grad()
def report(heads: StreamHeads, lm_head, h: torch.Tensor, targets: torch.Tensor, batch: int = 256) -> dict:
    """Per stream position j (1..K): top-1 of head j == the draft's own token j+1 steps ahead
    ("match"), and heads 1..j all right ("chain"); full vocabulary. Also the untrained
    baseline (head j = the LM head's own next-token choice)."""
    K = heads.n_heads
    hits = torch.zeros(K)
    chain = torch.zeros(K)
    base = torch.zeros(K)
    valid = torch.zeros(K)
    for i in range(0, len(h), batch):
        hb, tb = h[i:i + batch], targets[i:i + batch]
        top = lm_head(heads(hb)).argmax(-1)  # [b, K]
        first = lm_head(hb).argmax(-1)  # [b]
        ok = (top == tb) & (tb >= 0)
        running = torch.ones(len(hb), dtype=torch.bool)
        for j in range(K):
            v = tb[:, j] >= 0
            running = running & ok[:, j]
            hits[j] += ok[v, j].sum()
            chain[j] += running[v].sum()
            base[j] += (first[v] == tb[v, j]).sum()
            valid[j] += v.sum()
    return {f"head{j + 1}": {"positions": int(valid[j]), "match": round(float(hits[j] / valid[j]), 4),
                             "chain": round(float(chain[j] / valid[j]), 4),
                             "baseline_next_token": round(float(base[j] / valid[j]), 4)}
            for j in range(K)}


# ---------------------------------------------------------------------------------------------
# command line

def load_draft(name: str):
    """(model fp32 eval, tokenizer, path, key) of a draft: 'default', a local folder or a hub id."""
    from mirror_sd.models.loading import load_model
    loaded = load_model(name, "draft")
    return loaded.model, loaded.tokenizer, loaded.source.path, draft_key(loaded.source.path)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mirror_sd.training.streams", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draft", default="default", help="'default', a local model folder or a hub id")
    p.add_argument("--out", default=None, help="default: assets/streams-<draft folder>.pt")
    p.add_argument("--heads", type=int, default=3, help="K: tokens beyond the next one per forward")
    p.add_argument("--rank", type=int, default=48)
    p.add_argument("--tokens", type=int, default=10000, help="generated tokens to train on (about)")
    p.add_argument("--source", choices=["text", "continuations"], default="text",
                   help="text: one draft forward over stdlib text, targets = the draft's own choice "
                        "at each later position (cheap); continuations: the draft's greedy "
                        "continuations of stdlib-built prompts (exact self-distillation, ~4x the CPU)")
    p.add_argument("--chunk", type=int, default=256, help="text: tokens per chunk")
    p.add_argument("--new-tokens", type=int, default=128, help="continuation length per prompt")
    p.add_argument("--draft-precision", default="fp32", choices=["fp32", "int8-dyn"],
                   help="continuations: the draft's precision while generating them (int8-dyn: "
                        "the CPU's fast draft, several times quicker; the heads are fitted on its "
                        "hidden states against the fp32 LM head either way)")
    p.add_argument("--batch", type=int, default=24, help="prompts continued at once")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--held-out", type=float, default=0.1, help="fraction of prompts held out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--cache", default=None,
                   help="a .pt file for the continuations: written after generating them, read "
                        "instead of generating when it exists (to refit without regenerating)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    argv_list = sys.argv[1:] if argv is None else list(argv)
    try:
        torch.manual_seed(args.seed)
        if args.threads:
            set_process_threads(args.threads)
        t_start = time.monotonic()
        model, tokenizer, path, key = load_draft(args.draft)
        out = Path(args.out) if args.out else heads_path(key)
        model.generation_config.do_sample = False
        t_gen = time.monotonic()
        sequences = _sequences(args, model, tokenizer)
        gen_s = time.monotonic() - t_gen
        n_held = max(1, round(len(sequences) * args.held_out))
        held, train = sequences[:n_held], sequences[n_held:]
        h, targets = stream_targets(train, args.heads)
        h_held, t_held = stream_targets(held, args.heads)
        print(f"train: {len(h)} positions, held out: {len(h_held)}; generation {gen_s:.0f} s",
              file=sys.stderr)
        lm_head = model.get_output_embeddings()
        heads = StreamHeads(model.config.hidden_size, args.heads, args.rank)
        t_fit = time.monotonic()
        losses = fit(heads, lm_head.weight, h, targets, epochs=args.epochs, seed=args.seed,
                     lr=args.lr, weight_decay=args.weight_decay)
        fit_s = time.monotonic() - t_fit
        heads.eval()
        held_report = report(heads, lm_head, h_held, t_held)
        train_report = report(heads, lm_head, h[:len(h_held) * 2], targets[:len(h_held) * 2])
        heads.meta = {
            "draft": path.split("/")[-1], "draft_path": path, "hidden": model.config.hidden_size,
            "vocab": int(lm_head.weight.shape[0]), "n_heads": args.heads, "rank": args.rank,
            "command": "python -m mirror_sd.training.streams " + " ".join(shlex.quote(a) for a in argv_list),
            "seed": args.seed, "source": args.source, "draft_precision": args.draft_precision, "sequences": len(sequences), "train_positions": len(h),
            "held_out_positions": len(h_held), "losses": [round(x, 4) for x in losses],
            "held_out": held_report, "train_sample": train_report,
            "seconds": {"generation": round(gen_s), "fit": round(fit_s),
                        "total": round(time.monotonic() - t_start)},
            "torch_threads": torch.get_num_threads(),
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        heads.save(out)
        _print_report(heads, held_report, out)
        return 0
    except MirrorSDError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _sequences(args, model, tokenizer) -> list:
    """The token sequences to train on: from --cache, stdlib text, or the draft's continuations."""
    if args.cache and Path(args.cache).is_file():
        return torch.load(args.cache, weights_only=True)
    if args.source == "text":
        chunks = text_chunks(tokenizer, args.tokens, args.chunk, args.seed)
        print(f"{len(chunks)} chunks of {args.chunk} tokens", file=sys.stderr)
        sequences = teacher_forced(model, chunks)
    else:
        sequences = _continuations(args, model, tokenizer)
    if args.cache:
        torch.save(sequences, args.cache)
    return sequences


def _continuations(args, model, tokenizer) -> list:
    """The draft's greedy continuations of stdlib-built prompts, in batches."""
    from tqdm import tqdm

    gc_eos = model.generation_config.eos_token_id
    eos = set(gc_eos if isinstance(gc_eos, list) else [gc_eos]) | {tokenizer.eos_token_id}
    eos.discard(None)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos))
    n_prompts = max(2, round(args.tokens / args.new_tokens))
    prompts = build_prompts(tokenizer, n_prompts, args.seed)
    print(f"{len(prompts)} prompts, {args.new_tokens} new tokens each, batches of {args.batch}",
          file=sys.stderr)
    gen_model = model
    if args.draft_precision != "fp32":
        from mirror_sd.models.precision import apply_precision
        gen_model = apply_precision(copy.deepcopy(model), args.draft_precision, "draft")
    sequences = []
    for i in tqdm(range(0, len(prompts), args.batch), desc="draft continuations", file=sys.stderr):
        sequences += continuations(gen_model, prompts[i:i + args.batch], args.new_tokens, pad, eos)
    return sequences


def _print_report(heads, held_report: dict, out: Path) -> None:
    print(f"losses per epoch: {heads.meta['losses']}", file=sys.stderr)
    print("held-out, per stream position (token j+1 steps ahead; the LM head is position 0):")
    for name, r in held_report.items():
        print(f"  {name}: top-1 == draft's own token {r['match']:.1%}  (heads 1..j all right "
              f"{r['chain']:.1%}; untrained baseline {r['baseline_next_token']:.1%}; "
              f"{r['positions']} positions)")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB) in {heads.meta['seconds']['total']} s")


if __name__ == "__main__":
    raise SystemExit(main())
