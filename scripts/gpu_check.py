"""The CUDA path in one short run, for a machine with a GPU.

The real models need not travel to the GPU machine (a few GB): this builds models of the *real
shapes* from the default pair's config.json files with random weights (seeded), and the real
tokenizer:
  target: the Qwen2.5-Coder-1.5B architecture (28 layers), random init;
  draft:  the target's first DRAFT_LAYERS layers with its embeddings, norm and LM head (a
          layer-skip draft: random weights make an unrelated draft useless, a shared trunk
          gives a real acceptance rate).
Speeds are real measurements of these shapes; acceptance and hit rates are those of this
synthetic pair, not of the Coder pair (labelled so in the output).

Checks, each written to OUT/gpu_check.json and a readable OUT/gpu_check.md:
  1. both models on cuda:0 (draft lane on its own CUDA stream) and target cuda:0 / draft cpu,
     at bf16 and fp16: AR, SD and Mirror-SD greedy against transformers' generate() on the
     same loaded target (mismatches counted), tok/s (median of REPEATS, methods interleaved),
     mean accepted, hit rate, share of draft time hidden under target compute;
  2. the overlap itself: a target forward over gamma+1 tokens with gamma draft forwards in
     another thread, on one stream vs on two, against back to back.

Prepare on a machine with the default pair's cache (once; the folder is ignored by git, copy it
with the checkout):
    python scripts/gpu_check.py --prepare .gpu
On the GPU machine:
    PYTHONUNBUFFERED=1 python3 scripts/gpu_check.py --assets .gpu --out out/gpu_check
Here, a smoke test of the script itself on tiny shapes:
    python scripts/gpu_check.py --assets .gpu --out out/gpu_check_smoke --device cpu --small
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "generation_config.json")
DRAFT_LAYERS = 6
PROMPTS = ["Write a Python function that checks whether a string is a palindrome.",
           "Explain what a hash map is in two sentences.",
           "List three uses of the bisect module."]
METHOD_ORDER = ("ar", "sd", "mirror")
REPEATS = 2


def prepare(dest: Path) -> None:
    """Copy the default target's config and tokenizer files into `dest` (small: ~10 MB)."""
    from mirror_sd.models.loading import DEFAULT_TARGET, default_cache_dir
    src = default_cache_dir() / f"{DEFAULT_TARGET.stem}-hf"
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.json",) + TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, dest / name)
    print(f"prepared {dest}: {sorted(p.name for p in dest.iterdir())}")


def build_models(assets: Path, work: Path, small: bool) -> tuple[Path, Path]:
    """Random-weight target of the real shape and its layer-skip draft, saved as folders."""
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(assets)
    if small:
        config.update(dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2))
        config.head_dim = 16
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:4]
    config.torch_dtype = "float32"
    torch.manual_seed(0)
    target = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    keep = min(DRAFT_LAYERS, config.num_hidden_layers - 1)
    dconfig = AutoConfig.from_pretrained(assets)
    dconfig.update(config.to_dict())
    dconfig.num_hidden_layers = keep
    if hasattr(dconfig, "layer_types") and dconfig.layer_types:
        dconfig.layer_types = dconfig.layer_types[:keep]
    draft = AutoModelForCausalLM.from_config(dconfig, dtype=torch.float32)
    draft.load_state_dict(target.state_dict(), strict=False)  # first `keep` layers, embeddings, norm, head
    out = []
    for name, model in (("target", target), ("draft", draft)):
        path = work / name
        model.save_pretrained(path)
        for f in TOKENIZER_FILES:
            if (assets / f).exists():
                shutil.copy(assets / f, path / f)
        out.append(path)
    return out[0], out[1]


def reference(model, ids: list[int], n: int) -> list[int]:
    """transformers' own greedy generate() on the loaded target: the independent reference."""
    from transformers import GenerationConfig
    dev = model.get_input_embeddings().weight.device
    cfg = GenerationConfig(max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids], device=dev), generation_config=cfg)
    return out[0, len(ids):].tolist()


def run_methods(pair, prompts, settings) -> dict:
    from mirror_sd.engine.registry import METHODS
    rows = {m: {"tok_s": [], "mean_accepted": [], "hit_rate": [], "draft_hidden": [],
                "mismatches": 0, "first_mismatch": None} for m in METHOD_ORDER}
    for p_i, text in enumerate(prompts):
        ids = pair.encode_prompt(text)
        ref = reference(pair.target, ids, settings.max_new_tokens)
        for rep in range(REPEATS):
            for m in METHOD_ORDER:
                fin = list(METHODS[m](pair, settings).generate(ids))[-1]
                st = fin.stats
                r = rows[m]
                r["tok_s"].append(st["tokens_per_s"])
                r["mean_accepted"].append(st["mean_accepted"])
                if st.get("hit_rate") is not None:
                    r["hit_rate"].append(st["hit_rate"])
                if st.get("draft_hidden_fraction") is not None:
                    r["draft_hidden"].append(st["draft_hidden_fraction"])
                got = fin.token_ids[:len(ref)]
                if rep == 0 and got != ref:
                    r["mismatches"] += 1
                    at = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
                    r["first_mismatch"] = r["first_mismatch"] or f"prompt {p_i} token {at}"
    med = {}
    ar = statistics.median(rows["ar"]["tok_s"])
    for m, r in rows.items():
        tok_s = statistics.median(r["tok_s"])
        med[m] = {"tok_s": round(tok_s, 2), "speedup_vs_ar": round(tok_s / ar, 3),
                  "mean_accepted": round(statistics.median(r["mean_accepted"]), 2),
                  "hit_rate": round(statistics.median(r["hit_rate"]), 3) if r["hit_rate"] else None,
                  "draft_hidden": round(statistics.median(r["draft_hidden"]), 3) if r["draft_hidden"] else None,
                  "mismatches": f"{r['mismatches']}/{len(prompts)}", "first_mismatch": r["first_mismatch"]}
    return med


def overlap(pair, gamma: int, reps: int = 5) -> dict:
    """Target forward over gamma+1 tokens and gamma one-token draft forwards: back to back,
    at once on one stream, and at once with the draft on its own stream (placement.lane_stream)."""
    from mirror_sd.engine.lanes import Lane
    from mirror_sd.placement import cache_tensors, lane_stream, lane_sync
    prefix = [1 + i for i in range(64)]

    def fresh():
        t, d = Lane(pair.target, "target"), Lane(pair.draft, "draft")
        t.feed(prefix, 1)
        d.feed(prefix, 1)
        t.synchronize()
        d.synchronize()
        return t, d

    def target_work(t):
        t.feed(list(range(10, 11 + gamma)), gamma + 1)
        t.synchronize()

    def draft_work(d, own_stream):
        ctx = lane_stream(d.device, adopt=cache_tensors(d.cache)) if own_stream else contextlib.nullcontext()
        with ctx:
            for k in range(gamma):
                d.feed([20 + k], 1)
            lane_sync(d.device)

    out = {}
    for mode in ("back_to_back", "threads_one_stream", "threads_two_streams"):
        times = []
        for _ in range(reps):
            t, d = fresh()
            t0 = time.perf_counter()
            if mode == "back_to_back":
                target_work(t)
                draft_work(d, False)
            else:
                th = threading.Thread(target=draft_work, args=(d, mode == "threads_two_streams"))
                th.start()
                target_work(t)
                th.join()
            times.append((time.perf_counter() - t0) * 1e3)
        out[mode + "_ms"] = round(statistics.median(times), 2)
    t, d = fresh()
    t0 = time.perf_counter()
    target_work(t)
    out["target_alone_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
    t0 = time.perf_counter()
    draft_work(d, False)
    out["draft_alone_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prepare", type=Path, help="copy config + tokenizer files here and stop")
    ap.add_argument("--assets", type=Path, default=Path(".gpu"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out/gpu_check")))
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--small", action="store_true", help="tiny shapes (a smoke test of the script)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--precisions", default="bf16,fp16")
    args = ap.parse_args()
    if args.prepare:
        return prepare(args.prepare)
    from mirror_sd.engine.decoding import Settings
    from mirror_sd.models.loading import load_pair

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mirror-sd-gpu-check-"))  # large: kept out of --out
    report = {"torch": torch.__version__, "cuda": torch.cuda.is_available(),
              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "note": "random-weight models of the real shapes (target: Qwen2.5-Coder-1.5B "
                      f"architecture; draft: its first {DRAFT_LAYERS} layers); speeds are "
                      "measured, acceptance is this synthetic pair's", "runs": []}
    t0 = time.perf_counter()
    tdir, ddir = build_models(args.assets, work, args.small)
    report["build_s"] = round(time.perf_counter() - t0, 1)
    print(f"built models in {report['build_s']} s", flush=True)
    settings = Settings(max_new_tokens=args.tokens, gamma=4, branch_budget=2, exit_lens="off")
    placements = [(args.device, args.device)] + ([(args.device, "cpu")] if args.device != "cpu" else [])
    precisions = args.precisions.split(",") if args.device != "cpu" else ["fp32"]
    for prec in precisions:
        for tdev, ddev in placements:
            entry = {"precision": prec, "target_device": tdev, "draft_device": ddev}
            try:
                t1 = time.perf_counter()
                pair = load_pair(str(tdir), str(ddir), precision=prec, target_device=tdev, draft_device=ddev)
                entry["load_s"] = round(time.perf_counter() - t1, 1)
                entry["methods"] = run_methods(pair, PROMPTS, settings)
                entry["overlap"] = overlap(pair, settings.gamma)
                del pair
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            except Exception as e:  # one failing configuration must not hide the others
                entry["error"] = f"{type(e).__name__}: {e}"
            report["runs"].append(entry)
            print(json.dumps(entry), flush=True)
            (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    lines = [f"# GPU check ({report['gpu']}, torch {report['torch']})", "", report["note"], "",
             "| precision | target | draft | method | tok/s | vs AR | mean accepted | hit rate | draft hidden | mismatches vs generate() |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for e in report["runs"]:
        if "error" in e:
            lines.append(f"| {e['precision']} | {e['target_device']} | {e['draft_device']} | error: {e['error']} |||||||")
            continue
        for m, r in e["methods"].items():
            lines.append(f"| {e['precision']} | {e['target_device']} | {e['draft_device']} | {m} | {r['tok_s']} | "
                         f"{r['speedup_vs_ar']}x | {r['mean_accepted']} | {r['hit_rate']} | {r['draft_hidden']} | "
                         f"{r['mismatches']} {r['first_mismatch'] or ''} |")
    lines += ["", "Overlap (ms, median): " + "; ".join(
        f"{e['precision']} {e['target_device']}/{e['draft_device']}: {e['overlap']}" for e in report["runs"] if "overlap" in e)]
    (args.out / "gpu_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
