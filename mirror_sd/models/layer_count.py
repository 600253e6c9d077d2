"""A target's layer count without loading it (the app's exit-layer slider before a load).

From a local config.json (the default pair's converted cache, a model folder) or a GGUF
file's tensor names; None when only loading would tell (a hub id, a default pair whose cache
is not built yet, an unreadable file: the load will say why).
"""
from __future__ import annotations

import json
import re
from pathlib import Path


def config_layers(folder) -> int | None:
    """num_hidden_layers of a model folder's config.json (a multimodal one's text model)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    n = config.get("num_hidden_layers") or (config.get("text_config") or {}).get("num_hidden_layers")
    return int(n) if n else None


def gguf_layers(path) -> int | None:
    """Decoder blocks named in a GGUF file's tensors (blk.N.*)."""
    from mirror_sd.models.names import gguf_shapes
    try:
        blocks = {m.group(1) for name in gguf_shapes(Path(path)) if (m := re.match(r"blk\.(\d+)\.", name))}
    except Exception:  # not a readable GGUF: the load will say why
        return None
    return len(blocks) or None


def layer_count(target: str) -> int | None:
    """Layers of the model a --target name names ("default", a folder, a .gguf file)."""
    target = (target or "").strip() or "default"
    if target == "default":
        from mirror_sd.models import bundled
        return config_layers(bundled.default_cache_dir() / f"{bundled.DEFAULT_TARGET.stem}-hf")
    path = Path(target).expanduser()
    if path.is_dir():
        return config_layers(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return gguf_layers(path)
    return None
