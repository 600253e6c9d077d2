"""How many of the target's own greedy tokens a proposal vocabulary holds
(docs/performance.md, "The draft vocabulary").

    python research/draft_vocab_coverage.py assets/draft_vocab_qwen2.5-coder.safetensors [more files]

Reads the token ids of every AR run (`ar`, `ar-*`) in out/*/results.json (benchmark outputs;
each distinct output counted once) and prints, per file and for the plain "ids < N" sets, the
share of those tokens inside the set, overall and per category.
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.proposals import draft_vocab  # noqa: E402


def outputs(pattern="out/*/results.json"):
    seen = {}
    for path in glob.glob(pattern):
        try:
            results = json.load(open(path))
        except (OSError, ValueError):
            continue
        for q in results.get("questions", []):
            for method, run in q["methods"].items():
                if method.startswith("ar"):
                    for turn in run.get("turns", []):
                        toks = turn.get("token_ids") or []
                        seen[(q["question_id"], method, len(toks), tuple(toks[:5]))] = (q["category"], toks)
    return list(seen.values())


def coverage(ids: set, outs) -> str:
    per = {}
    for cat, toks in outs:
        a, b = per.get(cat, (0, 0))
        per[cat] = (a + sum(t in ids for t in toks), b + len(toks))
    inside, total = sum(a for a, _ in per.values()), sum(b for _, b in per.values())
    cats = ", ".join(f"{c} {a / b:.1%}" for c, (a, b) in per.items())
    return f"{inside / total:.1%} of {total} tokens ({cats})"


def main():
    outs = outputs()
    if not outs:
        print("no AR runs under out/*/results.json: run the benchmark first")
        return 1
    for path in sys.argv[1:]:
        print(path, coverage(set(draft_vocab.load(path).ids.tolist()), outs))
    for n in (16384, 32768, 49152, 65536):
        print(f"ids < {n}", coverage(set(range(n)), outs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
