"""Write the held-out question set: the second question of each category of the built-in set
(assets/questions.jsonl), the prompts that the exit lens's scoring weights were not chosen on.

    python research/heldout_questions.py [--out out/heldout-questions.jsonl]

The benchmark and the research scripts take it with `--questions out/heldout-questions.jsonl`.
"""
import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.questions import load_questions  # noqa: E402


def heldout(questions, index=1):
    """The question at position `index` within each category, in file order."""
    seen: dict[str, int] = {}
    out = []
    for q in questions:
        if seen.get(q.category, 0) == index:
            out.append(q)
        seen[q.category] = seen.get(q.category, 0) + 1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/heldout-questions.jsonl")
    ap.add_argument("--index", type=int, default=1, help="which question of each category (0 = first)")
    args = ap.parse_args()
    chosen = heldout(load_questions(None), args.index)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for q in chosen:
            f.write(json.dumps(q.to_dict()) + "\n")
    print(f"{len(chosen)} questions ({', '.join(str(q.question_id) for q in chosen)}) -> {args.out}")


if __name__ == "__main__":
    main()
