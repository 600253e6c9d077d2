"""Which mirror_sd modules a CLI run passes through, and how often a call climbs back up.

Runs `python -m mirror_sd generate` in process (mirror_sd.cli.main: --method mirror --gamma
auto --branch-budget auto --json, so loading, the pair's checks, the warm-up, the auto-tuning
probe and the decode are all on the path) on two tiny model folders built here, with a
profile hook on every Python call. A call is attributed to the nearest mirror_sd frame that
made it (calls through torch or transformers in between do not count as stops).

Counted, each once however often it happens:
- modules: distinct mirror_sd modules entered;
- stops: distinct (caller module, callee module) pairs with caller != callee;
- climbs: those stops whose callee sits in a higher layer than its caller, by LAYERS below
  (the lower a layer, the more of the package stands on it):

    0  errors, paths, latency (pure leaves)
    1  placement (devices and threads)
    2  cpu (kernels)
    3  models
    4  proposals
    5  engine (with engine/mirror)
    6  options, cli, __main__ (the generate command)
    7  bench, training, gpu_check (tools built on the command's pieces)
    8  ui

A module not named there (an older layout's) gets the layer of its folder.

    python research/run_path_trace.py            # this checkout
    PYTHONPATH=/path/to/other/checkout python /tmp/run_path_trace.py   # another one, read-only
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout this script is in

LAYERS = {
    "mirror_sd.errors": 0, "mirror_sd.paths": 0, "mirror_sd.latency": 0,
    "mirror_sd.placement": 1, "mirror_sd.cpu": 2, "mirror_sd.models": 3, "mirror_sd.proposals": 4,
    "mirror_sd.engine": 5, "mirror_sd.options": 6, "mirror_sd.cli": 6, "mirror_sd.__main__": 6,
    "mirror_sd.bench": 7, "mirror_sd.training": 7, "mirror_sd.gpu_check": 7, "ui": 8,
}


def layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return LAYERS[".".join(parts[:n])]
    raise KeyError(module)


def make_model_dir(path: Path, layers: int) -> str:
    """A tiny random Qwen2 model folder with a tiny tokenizer (as the tests build one)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mirror_sd.models.tiny import tiny_tokenizer
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=300, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, eos_token_id=258, tie_word_embeddings=False)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def mirror_module(frame) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if name.startswith("mirror_sd") else None


def trace(argv: list[str]) -> dict:
    from mirror_sd import cli

    modules, stops = set(), set()

    def hook(frame, event, arg):
        if event != "call":
            return
        callee = mirror_module(frame)
        if callee is None:
            return
        modules.add(callee)
        caller = frame.f_back
        while caller is not None and mirror_module(caller) is None:
            caller = caller.f_back
        if caller is not None and mirror_module(caller) != callee:
            stops.add((mirror_module(caller), callee))

    out = io.StringIO()
    sys.setprofile(hook)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = cli.main(argv)
    finally:
        sys.setprofile(None)
    climbs = sorted((a, b) for a, b in stops if layer(b) > layer(a))
    return {"rc": rc, "modules": sorted(modules), "stops": len(stops), "climbs": climbs,
            "tokens": len(json.loads(out.getvalue())["token_ids"]) if rc == 0 else None}


def main() -> int:
    import mirror_sd
    with tempfile.TemporaryDirectory() as tmp:
        target = make_model_dir(Path(tmp) / "target", layers=3)
        draft = make_model_dir(Path(tmp) / "draft", layers=1)
        result = trace(["generate", "--method", "mirror", "--target", target, "--draft", draft,
                        "--prompt", "hi there", "--max-new-tokens", "8", "--gamma", "auto",
                        "--branch-budget", "auto", "--json"])
    print(f"checkout: {Path(mirror_sd.__file__).resolve().parents[1]}")
    print(f"exit status {result['rc']}, {result['tokens']} tokens")
    print(f"modules visited: {len(result['modules'])}")
    for m in result["modules"]:
        print(f"  {layer(m)}  {m}")
    print(f"stops (distinct caller -> callee module pairs): {result['stops']}")
    print(f"climbs back up (callee in a higher layer): {len(result['climbs'])}")
    for a, b in result["climbs"]:
        print(f"  {a} ({layer(a)}) -> {b} ({layer(b)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
