"""Quick probe: methods on two fixed prompts, one run each, with per-lane span medians.

    python scripts/probe_methods.py 64 ar mirror:gamma=7 mirror:gamma=7:d=int8:branch_budget=3 sd:gamma=7

Each argument is method[:key=value...]; d=int8 runs that config with an int8 copy of the draft.
For orientation only: the benchmark (python -m mirror_sd.bench) is the measurement.
"""
import sys, statistics, torch, copy, warnings
warnings.filterwarnings("ignore")
from mirror_sd.models.loading import load_pair, PRECISIONS
from mirror_sd.models.pair import ModelPair
from mirror_sd.engine.decoding import Settings
from mirror_sd.engine.registry import METHODS
from mirror_sd.engine.events import Error
pair = load_pair("default", "default", progress=lambda m, f=None: None)
d8 = PRECISIONS["int8"].post_load(copy.deepcopy(pair.draft))
pair8 = ModelPair(pair.target, d8, pair.tokenizer)
print("threads", torch.get_num_threads(), flush=True)
prompts = ["Write a Python function that merges two sorted lists into one sorted list.",
           "Explain in three sentences how a hash map works."]
N = int(sys.argv[1])
configs = [a.split(":") for a in sys.argv[2:]]
for p in prompts:
    ids = pair.encode_prompt(p)
    ref = None
    for cfg in configs:
        m = cfg[0]; kw = dict(x.split("=") for x in cfg[1:]); d = kw.pop("d", "fp32"); kw = {k: int(v) for k, v in kw.items()}
        pr = pair8 if d == "int8" else pair
        ev = list(METHODS[m](pr, Settings(max_new_tokens=N, **kw)).generate(ids))
        f = ev[-1]; st = f.stats
        errs = [e for e in ev if isinstance(e, Error)]
        if ref is None: ref = f.token_ids
        spans = [e for e in ev if type(e).__name__ == "Span"]
        agg = {}
        for s in spans: agg.setdefault((s.lane, s.label), []).append((s.end_ns - s.start_ns) / 1e6)
        hr = st['hit_rate']; hf = st['draft_hidden_fraction']
        print(f"{':'.join(cfg):34s} tok/s {st['tokens_per_s']:.2f} wall {st['wall_s']:.1f} acc {st['mean_accepted']:.2f} hit {hr if hr is None else round(hr,2)} hid {hf if hf is None else round(hf,2)} same {f.token_ids == ref} {errs}", flush=True)
        print("   ", {f"{k[0]}/{k[1]}": f"{statistics.median(v):.0f}ms x{len(v)}" for k, v in agg.items()}, flush=True)
