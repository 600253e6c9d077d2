"""Greedy AR, SD and Mirror-SD on the int8 default target, one built-in question: are the
outputs identical? (the benchmark's question 4 mismatched before row-exact attention ran its
calls on one thread)

    flock /tmp/mirror-sd-cpu.lock python scripts/check_int8_exact.py [QUESTION_ID] [GAMMA] [BUDGET]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.engine.decoding import Settings  # noqa: E402
from mirror_sd.models.loading import load_pair  # noqa: E402
from mirror_sd.engine.registry import METHODS  # noqa: E402
from mirror_sd.bench.questions import load_questions  # noqa: E402

qid = sys.argv[1] if len(sys.argv) > 1 else "4"
gamma = int(sys.argv[2]) if len(sys.argv) > 2 else 4
budget = int(sys.argv[3]) if len(sys.argv) > 3 else 2
pair = load_pair("default", "default", precision="int8", draft_precision="int8-dyn")
question = next(q for q in load_questions(None) if str(q.question_id) == qid)
ids = pair.encode_prompt(question.turns[0])
settings = Settings(max_new_tokens=128, gamma=gamma, branch_budget=budget)
out = {m: list(METHODS[m](pair, settings).generate(ids))[-1] for m in ("ar", "sd", "mirror")}
for m, fin in out.items():
    same = fin.token_ids == out["ar"].token_ids
    print(f"{m}: {len(fin.token_ids)} tokens, {fin.stats['tokens_per_s']:.2f} tok/s, identical to AR: {same}")
