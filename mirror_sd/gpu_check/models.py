"""The pair a GPU check runs, and where it comes from.

- synthetic: models of the *real shapes* built from the default target's config.json with
  random weights (seeded) and the real tokenizer, so the real models need not travel to the
  GPU machine (a few GB): the target is the Qwen2.5-Coder-1.5B architecture, the draft its first
  DRAFT_LAYERS layers with its embeddings, norm and LM head (a layer-skip draft: an unrelated
  random draft would accept nothing, a shared trunk gives a real acceptance rate). Speeds are
  real measurements of these shapes; acceptance is this synthetic pair's.
- bundled: the default pair from its fp32 cache (`python -m mirror_sd.models
  --prepare-default --kind fp32`).
- tiny: the tiny random pair of mirror_sd.models.tiny (built in code, CPU float32): what the
  dry run falls back to where the bundled pair's cache is not there.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "generation_config.json")
DRAFT_LAYERS = 6
SOURCES = ("auto", "synthetic", "bundled", "tiny")


def _bundled_folders() -> tuple[Path, Path]:
    from mirror_sd.models.bundled import DEFAULT_DRAFT, DEFAULT_TARGET, default_cache_dir
    cache = default_cache_dir()
    return cache / f"{DEFAULT_TARGET.stem}-hf", cache / f"{DEFAULT_DRAFT.stem}-hf"


def bundled_cached() -> bool:
    return all((p / "config.json").is_file() for p in _bundled_folders())


def prepare(dest: Path) -> None:
    """Copy the default target's config and tokenizer files, and the draft's config as
    draft_config.json, into `dest` (small: ~10 MB)."""
    src = _bundled_folders()[0]
    if not (src / "config.json").is_file():
        from mirror_sd.errors import MirrorSDError
        raise MirrorSDError(f"The default pair's cache is not built ({src}): run "
                            f"`python -m mirror_sd.models --prepare-default --kind fp32` first.")
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.json",) + TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, dest / name)
    draft_config = _bundled_folders()[1] / "config.json"  # the draft's shape, for the forward costs
    if draft_config.is_file():
        shutil.copy(draft_config, dest / "draft_config.json")
    print(f"prepared {dest}: {sorted(p.name for p in dest.iterdir())}")


def choose_source(asked: str, assets: Path, dry_run: bool) -> tuple[str, str]:
    """(source, why) for `--pair asked`."""
    if asked != "auto":
        return asked, f"--pair {asked}"
    if not dry_run and (assets / "config.json").is_file():
        return "synthetic", f"{assets}/config.json is there (random weights of the real shapes)"
    if bundled_cached():
        return "bundled", "the default pair's converted cache is there"
    if dry_run:
        return "tiny", "the default pair's cache is not built here: the tiny random pair instead"
    return "bundled", "no --assets folder: the default pair, built into its cache first"


def build_synthetic(assets: Path, work: Path) -> tuple[Path, Path]:
    """Random-weight target of the real shape and its layer-skip draft, saved as folders."""
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(assets)
    config.torch_dtype = "float32"
    torch.manual_seed(0)
    target = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    keep = min(DRAFT_LAYERS, config.num_hidden_layers - 1)
    dconfig = AutoConfig.from_pretrained(assets)
    dconfig.num_hidden_layers = keep
    if getattr(dconfig, "layer_types", None):
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


def load(source: str, folders: tuple[str, str] | None, devices: tuple[str, str],
         precisions: tuple[str, str]):
    """The pair from `source` on (target, draft) devices at (target, draft) precisions."""
    if source == "tiny":
        from mirror_sd.models.tiny import tiny_pair
        pair = tiny_pair(0)
        dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
        pair.target.to(devices[0], dtypes[precisions[0]])
        pair.draft.to(devices[1], dtypes[precisions[1]])
        return pair
    from mirror_sd.models.loading import load_pair
    target, draft = folders or ("default", "default")
    return load_pair(target, draft, precision=precisions[0], target_precision=precisions[0],
                     draft_precision=precisions[1], target_device=devices[0],
                     draft_device=devices[1])
