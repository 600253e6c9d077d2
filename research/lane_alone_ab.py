"""Mirror-SD with and without `placement.lane_alone`, interleaved in one benchmark run.

    python research/lane_alone_ab.py [--out out/bench-lane-alone]

On a CPU, Mirror-SD's two lanes get one core each. Where one lane works alone (the prefill,
the first window, the draft lane's work after the target has delivered its verdict and waits
for the next window) the engine gives it both cores, as AR and SD have. The method
`mirror-one-core` runs the engine with that switched off (lane_alone replaced by a no-op for
the run), so the two can be compared question by question in one interleaved run.
"""
import argparse
import contextlib
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")

from mirror_sd.bench import harness as bench  # noqa: E402
from mirror_sd.bench.report import summary_markdown  # noqa: E402
from mirror_sd.bench.runners import engine_runner  # noqa: E402
from mirror_sd.engine.mirror import decoder as mirror  # noqa: E402
from mirror_sd.engine.settings import Settings  # noqa: E402
from mirror_sd.models.loading import load_pair  # noqa: E402
from mirror_sd.questions import load_questions, per_category  # noqa: E402


def one_core_runner():
    engine = engine_runner("mirror")

    def run(pair, prompt_ids, settings):
        real = mirror.lane_alone
        mirror.lane_alone = lambda pair: contextlib.nullcontext()
        try:
            result = engine(pair, prompt_ids, settings)
        finally:
            mirror.lane_alone = real
        result.stats["method"] = "mirror-one-core"
        return result

    run.method = "mirror-one-core"
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--questions", default=None)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--branch-budget", type=int, default=1)
    ap.add_argument("--out", default="out/bench-lane-alone")
    args = ap.parse_args()
    pair = load_pair("default", "default", precision=args.precision, progress=lambda m, f=None: None)
    questions = per_category(load_questions(args.questions), args.per_category)
    settings = Settings(max_new_tokens=args.max_new_tokens, gamma=args.gamma,
                        branch_budget=args.branch_budget)
    command = "python research/lane_alone_ab.py " + " ".join(sys.argv[1:])
    results = bench.run_benchmark(pair, questions, ["ar", "sd", "mirror", "mirror-one-core"], settings,
                                  out_dir=args.out, runners={"mirror-one-core": one_core_runner()},
                                  progress=False, meta={"command": command})
    print(summary_markdown(results, results["meta"].get("files"), results["meta"].get("notes")))


if __name__ == "__main__":
    main()
