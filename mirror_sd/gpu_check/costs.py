"""Forward costs of the model shapes the What-if's accelerator profile (c) projects with,
measured on the machine the check runs on: random weights of each shape, batch 1, a cache
of `prefix` tokens, one forward over k new tokens, as the engine runs it (transformers'
eager forward with a DynamicCache, no CUDA graphs, no compilation).

Each forward is timed twice: on the device clock (CUDA events around it on its stream) and
on the host clock (perf_counter_ns around the forward and a synchronize), medians of `reps`
after `warm` untimed ones. A shape is built on the device (random weights, seeded), timed
and freed before the next; shapes not started within `budget_s` are reported as skipped.

The shapes are the public model cards' (mirror_sd/latency/whatif_hardware.py TARGETS and
DRAFTS); the default pair's two come from its own config files where --assets has them.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

QWEN3_COMMON = dict(model_type="qwen3", vocab_size=151_936, head_dim=128, num_key_value_heads=8,
                    max_position_embeddings=40_960, rope_theta=1_000_000.0, rms_norm_eps=1e-6)
# name -> (config fields over QWEN3_COMMON, the What-if's shape name); public model cards
QWEN3 = {
    "Qwen3-0.6B": (dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                        intermediate_size=3072, tie_word_embeddings=True), "0.6B"),
    "Qwen3-8B": (dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                      intermediate_size=12_288, tie_word_embeddings=False), "8B"),
    "Qwen3-14B": (dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=40,
                       intermediate_size=17_408, tie_word_embeddings=False), "14B"),
    "Qwen3-32B": (dict(hidden_size=5120, num_hidden_layers=64, num_attention_heads=64,
                       intermediate_size=25_600, tie_word_embeddings=False), "32B"),
}
TINY = dict(model_type="qwen3", vocab_size=512, head_dim=16, num_key_value_heads=2, hidden_size=64,
            num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, tie_word_embeddings=True)
ROWS = (1, 2, 4, 8)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def shapes(assets: Path | None, dry_run: bool) -> list[tuple[str, str | None, dict]]:
    """(name, the What-if's shape name or None, config dict) in the order they are timed:
    the default pair first (its own configs), then the Qwen3 shapes by size."""
    if dry_run:
        return [("tiny-qwen3", None, dict(TINY))]
    out = []
    for name, file, what in (("Qwen2.5-Coder-1.5B", "config.json", "1.5B"),
                             ("Qwen2.5-Coder-0.5B", "draft_config.json", "0.5B")):
        path = (assets / file) if assets is not None else None
        if path is not None and path.is_file():
            out.append((name, what, json.loads(path.read_text())))
    out += [(name, what, {**QWEN3_COMMON, **fields}) for name, (fields, what) in QWEN3.items()]
    return out


def _build(config: dict, device: str, dtype):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model(**config)
    torch.manual_seed(0)
    try:  # weights made where they run: a 32B shape initialises in seconds on a GPU
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    except (RuntimeError, TypeError, NotImplementedError):  # a transformers that builds on the CPU only
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.to(device).eval()


def _time_rows(model, device: str, prefix: int, rows: int, reps: int, warm: int) -> dict:
    from transformers import DynamicCache
    cuda = device.startswith("cuda")
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(rows)
    ids = torch.randint(0, vocab, (1, prefix), generator=gen).to(device)
    new = torch.randint(0, vocab, (1, rows), generator=gen).to(device)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        dev_ms, host_ms = [], []
        for i in range(warm + reps):
            if cuda:
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            t0 = time.perf_counter_ns()
            model(input_ids=new, past_key_values=cache, use_cache=True, logits_to_keep=rows)
            if cuda:
                b.record()
                torch.cuda.synchronize()
            t1 = time.perf_counter_ns()
            cache.crop(-rows)  # back to the prefix
            if i >= warm:
                host_ms.append((t1 - t0) / 1e6)
                dev_ms.append(a.elapsed_time(b) if cuda else (t1 - t0) / 1e6)
    return {"device_ms": round(statistics.median(dev_ms), 3), "host_ms": round(statistics.median(host_ms), 3)}


def forward_costs(device: str, precision: str = "bf16", assets: Path | None = None, dry_run: bool = False,
                  prefix: int = 256, reps: int = 15, warm: int = 3, budget_s: float = 150.0) -> dict:
    """{"device", "precision", "prefix", "clock", "shapes": [{name, what_if, params_b, layers,
    rows: {k: {device_ms, host_ms}}} or {name, status: skipped/error, reason}]}."""
    t_start = time.perf_counter_ns()
    out = {"device": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
           "precision": precision, "prefix": prefix, "reps": reps,
           "clock": "CUDA events" if device.startswith("cuda") else "host perf_counter_ns",
           "kind": "eager transformers forward, DynamicCache, random weights of each shape", "shapes": []}
    for name, what, config in shapes(assets, dry_run):
        spent = (time.perf_counter_ns() - t_start) / 1e9
        if spent > budget_s:
            out["shapes"].append({"name": name, "status": "skipped",
                                  "reason": f"time budget: {spent:.0f} s of {budget_s:.0f} s spent"})
            continue
        try:
            t0 = time.perf_counter_ns()
            model = _build(config, device, DTYPES[precision])
            entry = {"name": name, "what_if": what, "status": "ran",
                     "params_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 3),
                     "layers": model.config.num_hidden_layers,
                     "build_s": round((time.perf_counter_ns() - t0) / 1e9, 1),
                     "rows": {str(k): _time_rows(model, device, prefix, k, reps, warm) for k in ROWS}}
        except Exception as e:  # one shape failing (memory, an unknown config) must not hide the others
            entry = {"name": name, "what_if": what, "status": "error", "reason": f"{type(e).__name__}: {e}"}
        out["shapes"].append(entry)
        print(json.dumps(entry), flush=True)
        model = None
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def markdown(costs: dict) -> list[str]:
    """The report's section: ms per forward by rows, device and host clocks."""
    lines = ["", f"## Forward costs ({costs['device']}, {costs['precision']}, {costs['kind']}; "
                 f"cache of {costs['prefix']} tokens; medians of {costs['reps']}; {costs['clock']})", "",
             "| shape | params (B) | layers | " + " | ".join(f"{k} rows: device / host ms" for k in ROWS) + " |",
             "|---|---|---|" + "---|" * len(ROWS)]
    for s in costs["shapes"]:
        if s["status"] != "ran":
            lines.append(f"| {s['name']} | {s['status']}: {s.get('reason', '')} |")
            continue
        cells = " | ".join(f"{s['rows'][str(k)]['device_ms']} / {s['rows'][str(k)]['host_ms']}" for k in ROWS)
        lines.append(f"| {s['name']} | {s['params_b']} | {s['layers']} | {cells} |")
    return lines
