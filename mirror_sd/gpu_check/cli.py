"""`python -m mirror_sd.gpu_check --out DIR [--dry-run]`: see the package's docstring."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from mirror_sd.errors import MirrorSDError
from mirror_sd.gpu_check import models
from mirror_sd.gpu_check.measure import overlap, run_methods
from mirror_sd.gpu_check.report import write_reports
from mirror_sd.placement import CONFIGURATIONS, GPU_CONFIGURATIONS, configuration_devices

PROMPTS = ["Write a Python function that checks whether a string is a palindrome.",
           "Explain what a hash map is in two sentences.",
           "List three uses of the bisect module."]
# (configuration, precision on the GPU): the shared GPU at both half precisions, the split
# configurations at bf16; a model on the CPU runs fp32 (fp16 has no fast CPU matmuls)
PLAN = [("gpu-streams", "bf16"), ("gpu-streams", "fp16"), ("target-gpu-draft-cpu", "bf16"),
        ("draft-gpu-target-cpu", "bf16"), ("cpu", "fp32")]
BUDGET_S = 480  # the whole check within 9 minutes, with a minute to spare for the start
COSTS_BUDGET_S = 150  # of which the forward costs of the What-if's shapes (costs.py)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m mirror_sd.gpu_check",
                                 description="AR, SD and Mirror-SD in each device configuration, "
                                             "against generate(), with the lanes' overlap.")
    ap.add_argument("--out", type=Path, required=False, default=Path(os.environ.get("OUT", "out/gpu_check")))
    ap.add_argument("--dry-run", action="store_true",
                    help="on the CPU, a few tokens: the same code path; what needs a GPU is skipped")
    ap.add_argument("--pair", choices=models.SOURCES, default="auto",
                    help="auto: synthetic with --assets (not in a dry run), else the bundled pair "
                         "when its cache is built, else (dry run) the tiny pair")
    ap.add_argument("--assets", type=Path, default=Path(".gpu"),
                    help="config and tokenizer of the default target (made by --prepare)")
    ap.add_argument("--prepare", type=Path, help="copy config + tokenizer files here and stop")
    ap.add_argument("--tokens", type=int, default=None, help="new tokens per run (64; dry run 6)")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S,
                    help="configurations not started by then are skipped, with the reason")
    ap.add_argument("--costs-budget-s", type=float, default=COSTS_BUDGET_S,
                    help="the forward costs of the What-if's model shapes first, within this many "
                         "seconds (0: none)")
    return ap


def _plan(dry_run: bool) -> list[tuple[str, str]]:
    """The dry run takes each configuration once at fp32 (a GPU one is then skipped here)."""
    if dry_run:
        return [(name, "fp32") for name in ("cpu",) + GPU_CONFIGURATIONS]
    return PLAN


def _precisions(devices: tuple[str, str], gpu_precision: str) -> tuple[str, str]:
    return tuple("fp32" if d == "cpu" else gpu_precision for d in devices)


def _run_one(entry: dict, source: str, folders, tokens: int, settings_cls) -> None:
    devices = configuration_devices(entry["configuration"])
    precisions = _precisions(devices, entry["precision"])
    entry.update(target_device=devices[0], draft_device=devices[1],
                 target_precision=precisions[0], draft_precision=precisions[1])
    t0 = time.perf_counter_ns()
    pair = models.load(source, folders, devices, precisions)
    entry["load_s"] = round((time.perf_counter_ns() - t0) / 1e9, 2)
    settings = settings_cls(max_new_tokens=tokens, gamma=4, branch_budget=2, exit_lens="off")
    # a model on the CPU decodes far slower than on the GPU: one prompt, one repeat there
    slow = "cpu" in devices and not entry["dry_run"]
    prompts = PROMPTS[:1] if slow or entry["dry_run"] else PROMPTS
    entry["prompts"], entry["repeats"] = len(prompts), 1 if slow or entry["dry_run"] else 2
    entry["methods"] = run_methods(pair, prompts, settings, entry["repeats"])
    entry["overlap"] = overlap(pair, settings.gamma, reps=2 if entry["dry_run"] else 5)
    entry["status"] = "ran"
    del pair
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _forward_costs(args) -> dict:
    """The What-if's shapes timed on this machine's GPU (the tiny shape on the CPU in a dry run)."""
    from mirror_sd.gpu_check.costs import forward_costs
    gpu = torch.cuda.is_available() and not args.dry_run
    return forward_costs("cuda:0" if gpu else "cpu", "bf16" if gpu else "fp32",
                         args.assets if args.assets.is_dir() else None, dry_run=not gpu,
                         reps=15 if gpu else 3, warm=3 if gpu else 1, budget_s=args.costs_budget_s)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.prepare:
        models.prepare(args.prepare)
        return 0
    warnings.filterwarnings("ignore")
    from mirror_sd.engine.settings import Settings
    t_start = time.perf_counter_ns()
    tokens = args.tokens or (6 if args.dry_run else 64)
    source, why = models.choose_source(args.pair, args.assets, args.dry_run)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"mode": "dry-run" if args.dry_run else "gpu", "torch": torch.__version__,
              "cuda": torch.cuda.is_available(),
              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "pair": {"source": source, "why": why}, "tokens": tokens,
              "configurations": {n: d for n, (_, _, d) in CONFIGURATIONS.items() if n != "auto"},
              "runs": []}
    if source == "synthetic":
        report["pair"]["note"] = (f"random-weight models of the real shapes (target: the "
                                  f"default target's architecture; draft: its first "
                                  f"{models.DRAFT_LAYERS} layers): speeds are measured, "
                                  f"acceptance is this synthetic pair's")
    if args.costs_budget_s > 0:
        report["forward_costs"] = _forward_costs(args)
        write_reports(report, args.out)
    folders = None
    if source == "synthetic":
        work = Path(tempfile.mkdtemp(prefix="mirror-sd-gpu-check-"))  # large: kept out of --out
        t0 = time.perf_counter_ns()
        folders = tuple(str(p) for p in models.build_synthetic(args.assets, work))
        report["build_s"] = round((time.perf_counter_ns() - t0) / 1e9, 1)
    for name, precision in _plan(args.dry_run):
        entry = {"configuration": name, "precision": precision, "dry_run": args.dry_run}
        elapsed = (time.perf_counter_ns() - t_start) / 1e9
        if elapsed > args.budget_s:
            entry.update(status="skipped", reason=f"time budget: {elapsed:.0f} s of "
                                                  f"{args.budget_s:.0f} s spent before it started")
        else:
            try:
                _run_one(entry, source, folders, tokens, Settings)
            except MirrorSDError as e:  # checked before loading: this machine cannot run it
                entry.update(status="skipped", reason=str(e))
            except Exception as e:  # one failing configuration must not hide the others
                entry.update(status="error", reason=f"{type(e).__name__}: {e}")
        report["runs"].append(entry)
        print(json.dumps({k: v for k, v in entry.items() if k != "methods"}), flush=True)
        report["elapsed_s"] = round((time.perf_counter_ns() - t_start) / 1e9, 1)
        write_reports(report, args.out)  # after each one: a stopped check keeps what it had
    print(f"wrote {args.out / 'gpu_check.json'} and {args.out / 'gpu_check.md'} "
          f"({report['elapsed_s']} s)")
    return 1 if any(r["status"] == "error" for r in report["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
