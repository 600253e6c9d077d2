"""What the live page costs a timed run: AR's decode speed through the command line's path
against the app's, interleaved, on the same loaded pair, prompt and settings.

- CLI: the run path of `python -m mirror_sd generate --method ar` (mirror_sd/cli.py: prepare,
  then `decode`, which reads every event).
- App: the app's Job (its thread, its event recording and token texts) with the polling
  handler's own loop (ui/handlers._stream) consuming it as Gradio would: four polls a second,
  each turning the new events into the live board's JSON items, the status line once a second,
  every frame serialised to JSON as if sent.

Each side runs its torch work on a thread that is the only live OpenMP team in the process,
as each does in its own process: the CLI on its main thread, the app on a job's thread (the app's
main thread serves the page and runs no torch work). So here the CLI side runs on a thread of
its own that ends with the run, and this script's main thread runs no torch work. Were the main
thread's team kept alive beside a job's, libgomp would count more spinning threads than cores and
make every idle worker sleep at once (its throttled spin), so each of a forward's many small
parallel regions would wait for a thread to wake: on a 2-core AMD EPYC that alone made the app's
side 0.53-0.82x of the CLI's (docs/performance.md, "Each lane at full speed").

Both figures are the engine's decode speed of the run (tokens after the first commit over the
time after it, Finish's stats, the figure the page's cards show). Rounds alternate the order
(CLI first, then app first). Also reports the time the job thread spent decoding token texts
during the timed runs (ui/session.TokenTexts).

    python scripts/live_cost.py [--tokens 56] [--rounds 6] [--precision int8] [--tiny]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mirror_sd.cli import decode  # noqa: E402
from mirror_sd.engine.run_path import RunPath  # noqa: E402
from ui.frames import RunInputs  # noqa: E402
from ui.handlers import _stream  # noqa: E402
from ui.session import Job, RunRequest, TokenTexts  # noqa: E402
from ui.state import AppState  # noqa: E402
from ui.texts import DEFAULT_EXAMPLE, EXAMPLES, parse_prompt  # noqa: E402

TEXT_NS = [0]  # time the job thread spent in TokenTexts.on_event


def _timed_texts():
    original = TokenTexts.on_event

    def on_event(self, ev):
        t = time.perf_counter_ns()
        original(self, ev)
        TEXT_NS[0] += time.perf_counter_ns() - t
    TokenTexts.on_event = on_event


def on_own_thread(fn):
    """fn() on a thread that ends with it (its OpenMP team ends too); its result."""
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()), name="live-cost-cli")
    thread.start()
    thread.join()
    if not out:
        raise SystemExit("the CLI side failed (its traceback is above)")
    return out[0]


def cli_run(run) -> float:
    """The CLI's run path, on a thread of its own (see the module's note)."""
    def one():
        _, finish = decode(run, "ar", stream=False)
        return finish.stats["decode_tokens_per_s"]
    return on_own_thread(one)


def app_run(app: AppState, req: RunRequest) -> tuple[float, int, int, float]:
    """One app run of AR with the page's polling loop; (decode tok/s, frames, bytes sent, wall)."""
    job = Job(req, app.pairs, threading.Event())
    job.start()
    frames = sent = 0
    for frame in _stream(job, req.methods, time.monotonic(), 1, 1):
        frames += 1
        sent += len(json.dumps([x for x in frame if isinstance(x, str)]))
    job.join()
    if job.error:
        raise SystemExit(job.error)
    stats = job.records["ar"].finish.stats
    return stats["decode_tokens_per_s"], frames, sent, stats["wall_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=56)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--tiny", action="store_true", help="the tiny random pair (a quick check)")
    args = ap.parse_args(argv)
    _timed_texts()
    app = AppState.tiny() if args.tiny else AppState()
    inputs = RunInputs(prompt=EXAMPLES[DEFAULT_EXAMPLE], precision=args.precision,
                       max_new_tokens=args.tokens, methods=["ar"])
    req = RunRequest(inputs.prompt, inputs.spec(), inputs.settings(), ("ar",))
    print(f"loading {req.spec} ...", flush=True)
    app_run(app, req)  # loads, checks and warms the pair the app's way (not counted)
    loaded = app.pairs.get(req.spec, lambda *a: None)
    path = RunPath(["ar"], req.settings)  # tunes auto settings for the methods it runs
    run = on_own_thread(lambda: path.prepare(loaded.pair, parse_prompt(req.prompt)))
    cli_run(run)  # one untimed run each way first
    cli, live, text_share = [], [], []
    for r in range(args.rounds):
        for side in (("cli", "app") if r % 2 == 0 else ("app", "cli")):
            if side == "cli":
                cli.append(cli_run(run))
                print(f"round {r + 1} CLI {cli[-1]:.2f} tok/s", flush=True)
            else:
                TEXT_NS[0] = 0
                tps, frames, sent, wall = app_run(app, req)
                live.append(tps)
                text_share.append(TEXT_NS[0] / 1e9 / wall)
                print(f"round {r + 1} app {tps:.2f} tok/s ({frames} frames, {sent} bytes sent; "
                      f"token texts {TEXT_NS[0] / 1e6:.1f} ms of {wall * 1e3:.0f} ms)", flush=True)
    ratio = statistics.median(live) / statistics.median(cli)
    paired = statistics.median(a / c for a, c in zip(live, cli))
    print(f"\nAR decode, {args.tokens} tokens, {args.precision}, {args.rounds} interleaved rounds: "
          f"CLI median {statistics.median(cli):.2f} tok/s (range {min(cli):.2f}-{max(cli):.2f}), "
          f"app with the live board median {statistics.median(live):.2f} tok/s (range "
          f"{min(live):.2f}-{max(live):.2f})")
    print(f"app / CLI: {ratio:.3f} (medians), {paired:.3f} (median of the rounds' ratios); "
          f"token texts in the job thread: {100 * statistics.median(text_share):.2f}% of the run's wall time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
