"""Benchmark questions in Spec-Bench's format (docs/algorithm.md section 9).

One JSON object per line: `question_id`, `category`, `turns` (the user messages; a multi-turn
question is answered turn by turn, each answer fed back), optional `reference`. The built-in
set (assets/questions.jsonl) was written for this project: a few prompts per task group.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from mirror_sd.errors import MirrorSDError
from mirror_sd.paths import ASSETS

BUILTIN_QUESTIONS = ASSETS / "questions.jsonl"


@dataclass
class Question:
    question_id: int | str
    category: str
    turns: list[str]
    reference: list[str] | str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["reference"] is None:
            del d["reference"]
        return d


def parse_question(obj, where: str = "question") -> Question:
    if not isinstance(obj, dict):
        raise MirrorSDError(f"{where}: expected a JSON object, got {type(obj).__name__}.")
    missing = [k for k in ("question_id", "category", "turns") if k not in obj]
    if missing:
        raise MirrorSDError(f"{where}: missing field(s) {', '.join(missing)} (Spec-Bench format: "
                            f"question_id, category, turns, optional reference).")
    turns = obj["turns"]
    if isinstance(turns, str):
        turns = [turns]
    if (not isinstance(turns, list) or not turns
            or not all(isinstance(t, str) and t.strip() for t in turns)):
        raise MirrorSDError(f"{where}: 'turns' must be a non-empty list of non-empty strings.")
    category = obj["category"]
    if not isinstance(category, str) or not category.strip():
        raise MirrorSDError(f"{where}: 'category' must be a non-empty string.")
    return Question(obj["question_id"], category.strip(), list(turns), obj.get("reference"))


def load_questions(path: str | Path | None = None) -> list[Question]:
    """Questions from a Spec-Bench-format .jsonl file (the built-in set when `path` is None)."""
    p = Path(path) if path is not None else BUILTIN_QUESTIONS
    if not p.is_file():
        raise MirrorSDError(f"No question file at {p}.")
    out, seen = [], set()
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise MirrorSDError(f"{p.name} line {i}: not valid JSON ({e.msg}).") from e
        q = parse_question(obj, f"{p.name} line {i}")
        if q.question_id in seen:
            raise MirrorSDError(f"{p.name} line {i}: question_id {q.question_id!r} appears twice.")
        seen.add(q.question_id)
        out.append(q)
    if not out:
        raise MirrorSDError(f"{p} holds no questions.")
    return out


def per_category(questions: list[Question], k: int | None) -> list[Question]:
    """The first k questions of each category, in file order (all when k is None)."""
    if k is None:
        return list(questions)
    if k < 1:
        raise MirrorSDError(f"--per-category must be at least 1 (got {k}).")
    counts: dict[str, int] = {}
    out = []
    for q in questions:
        if counts.get(q.category, 0) < k:
            counts[q.category] = counts.get(q.category, 0) + 1
            out.append(q)
    return out


def categories(questions: list[Question]) -> list[str]:
    """Categories in order of first appearance."""
    return list(dict.fromkeys(q.category for q in questions))
