"""A trained exit lens: a small affine map per exit layer that makes the early exit useful.

The raw early exit (the target's final norm + LM head read at layer L) guesses the target's
token poorly before the last few layers: on the default 1.5B target the final token is in the
raw top-8 at layer 14 only 19% of the time (docs/performance.md). A "tuned lens" (Belrose et al. 2023,
arXiv 2303.08112) learns, per layer, a map applied to the hidden state *before* the final
norm and LM head:

    lens_L(h) = h + U_L (V_L^T h) + b_L          (rank r: 2 H r + H parameters per layer)

trained to minimise KL(final distribution || exit distribution) (`mirror_sd.training.exit_lens`).
The target's weights are untouched and the lens only changes which branches the draft rolls
out, never what is committed, so decoding stays lossless.

File: safetensors with tensors `layer{L}.U` [H, r], `layer{L}.V` [H, r], `layer{L}.b` [H]
(fp16) and string metadata: the format, the target's shape and fingerprint (which lens fits
which model), the layers, the training command and its held-out report (JSON).
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch

from mirror_sd.paths import ASSETS

log = logging.getLogger(__name__)

FORMAT = "mirror-sd exit lens v1"
LENS_CHOICES = ("auto", "off")  # or a path to a lens file
SHIPPED_GLOB = "exit_lens_*.safetensors"
_MATCH_KEYS = ("model_type", "hidden_size", "num_layers", "vocab_size", "fingerprint")


# 1) which model a lens belongs to

def target_meta(model) -> dict:
    """Shape and fingerprint of a target: a lens is used only on the model it was trained on.

    The fingerprint hashes the final norm's weight and the input embeddings' first rows,
    rounded to bf16: cheap, different for any fine-tune of the same shape, and the same for
    every precision the model is loaded at (the CPU kernels keep the embeddings and norms as
    they are; bf16 loads round them exactly as here)."""
    from mirror_sd.models.pair import exit_parts, model_vocab_size
    _, norm, _ = exit_parts(model)
    rows = model.get_input_embeddings().weight.detach()[:8]
    digest = hashlib.sha256()
    for t in (norm.weight.detach(), rows):
        digest.update(t.to(torch.bfloat16).float().cpu().contiguous().numpy().tobytes())
    cfg = model.config
    return {"model_type": str(getattr(cfg, "model_type", "")), "hidden_size": int(cfg.hidden_size),
            "num_layers": int(cfg.num_hidden_layers), "vocab_size": model_vocab_size(model),
            "fingerprint": digest.hexdigest()[:32]}


def mismatch(meta: dict, model_meta: dict) -> str | None:
    """None when a lens's metadata fits the model, else what differs (for a message)."""
    for key in _MATCH_KEYS:
        if str(meta.get(key)) != str(model_meta.get(key)):
            what = "weights" if key == "fingerprint" else key.replace("_", " ")
            return f"trained on a target with other {what} ({meta.get(key)} vs {model_meta.get(key)})"
    return None


# 2) the lens

class ExitLens(torch.nn.Module):
    """Per-layer low-rank affine maps h -> h + U (V^T h) + b. `meta` holds the file's metadata."""

    def __init__(self, hidden_size: int, layers, rank: int, meta: dict | None = None):
        super().__init__()
        self.hidden_size, self.rank = int(hidden_size), int(rank)
        self.layers = sorted(int(L) for L in layers)
        self.U = torch.nn.ParameterDict()
        self.V = torch.nn.ParameterDict()
        self.b = torch.nn.ParameterDict()
        for L in self.layers:  # U = 0: starts as the identity (the raw exit), as LoRA does
            self.U[str(L)] = torch.nn.Parameter(torch.zeros(hidden_size, rank))
            self.V[str(L)] = torch.nn.Parameter(torch.randn(hidden_size, rank) / hidden_size ** 0.5)
            self.b[str(L)] = torch.nn.Parameter(torch.zeros(hidden_size))
        self.meta = dict(meta or {})
        self._cast: dict = {}  # (layer, dtype, device) -> (U, V, b) for inference

    def forward(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """h: [..., H] at the output of decoder layer `layer` (1-based) -> [..., H]."""
        k = str(layer)
        return h + (h @ self.V[k]) @ self.U[k].T + self.b[k]

    @torch.inference_mode()
    def apply(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """forward() in h's dtype and device, with the weights cast once (inference only)."""
        key = (layer, h.dtype, h.device)
        if key not in self._cast:
            k = str(layer)
            self._cast[key] = tuple(p.detach().to(h.device, h.dtype) for p in (self.U[k], self.V[k], self.b[k]))
        U, V, b = self._cast[key]
        return h + (h @ V) @ U.T + b

    def hit_rates(self) -> dict[int, float]:
        """Held-out "final token in the lens's top-8" per layer, from the training report."""
        report = self.meta.get("report") or {}
        return {int(L): float(r["lens_top8"]) for L, r in report.get("layers", {}).items()
                if "lens_top8" in r}

    def save(self, path, meta: dict | None = None) -> None:
        from safetensors.torch import save_file
        meta = {**self.meta, **(meta or {})}
        tensors = {}
        for L in self.layers:
            for name, pd in (("U", self.U), ("V", self.V), ("b", self.b)):
                tensors[f"layer{L}.{name}"] = pd[str(L)].detach().to(torch.float16).contiguous()
        header = {"format": FORMAT, "layers": ",".join(map(str, self.layers)), "rank": str(self.rank),
                  "hidden_size": str(self.hidden_size)}
        for k, v in meta.items():
            if k not in header:
                header[k] = v if isinstance(v, str) else json.dumps(v)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path), metadata=header)


def read_meta(path) -> dict:
    """A lens file's metadata (JSON values decoded) without reading its tensors."""
    from safetensors import safe_open
    with safe_open(str(path), "pt") as f:
        raw = f.metadata() or {}
    meta = {}
    for k, v in raw.items():
        try:
            meta[k] = json.loads(v) if k not in ("format", "layers", "fingerprint", "command") else v
        except (json.JSONDecodeError, TypeError):
            meta[k] = v
    return meta


def load_lens(path) -> ExitLens:
    from safetensors.torch import load_file
    meta = read_meta(path)
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path} is not a mirror-sd exit lens (format {meta.get('format')!r})")
    tensors = load_file(str(path))
    layers = [int(L) for L in meta["layers"].split(",")]
    lens = ExitLens(int(meta["hidden_size"]), layers, int(meta["rank"]), meta)
    with torch.no_grad():
        for L in layers:
            for name, pd in (("U", lens.U), ("V", lens.V), ("b", lens.b)):
                pd[str(L)].copy_(tensors[f"layer{L}.{name}"].float())
    return lens.eval().requires_grad_(False)


# 3) which lens a run uses

@dataclass
class LensChoice:
    lens: ExitLens | None  # None: the raw early exit
    path: str | None
    message: str  # what was decided and why (run info; a Notice when the user should know)
    notify: bool = False  # worth a Notice (a lens was asked for or exists, but is not used)

    def covers(self, layer: int) -> bool:
        return self.lens is not None and layer in self.lens.layers


_found: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def find_lens(model, choice: str = "auto", assets: Path | None = None) -> LensChoice:
    """The lens for `model`: "off" -> none; "auto" -> a shipped lens (assets/) whose metadata
    matches the model, if any; a path -> that file, if it matches. Cached per model."""
    if choice == "off":
        return LensChoice(None, None, "exit lens off: raw early exit")
    key = (choice, str(assets))
    with _lock:
        per_model = _found.setdefault(model, {})
        if key not in per_model:
            per_model[key] = _find(model, choice, assets or ASSETS)
        return per_model[key]


def _find(model, choice: str, assets: Path) -> LensChoice:
    want = target_meta(model)
    if choice != "auto":
        path = Path(choice).expanduser()
        if not path.is_file():
            return LensChoice(None, None, f"exit lens {choice} not found: raw early exit", True)
        try:
            meta = read_meta(path)
        except Exception as e:  # not a safetensors file, truncated...
            return LensChoice(None, None, f"exit lens {path.name} unreadable ({e}): raw early exit", True)
        why = mismatch(meta, want)
        if why:
            return LensChoice(None, None, f"exit lens {path.name} not used: {why}; raw early exit", True)
        return LensChoice(load_lens(path), str(path), f"exit lens {path.name}")
    for path in sorted(assets.glob(SHIPPED_GLOB)):
        try:
            if mismatch(read_meta(path), want) is None:
                return LensChoice(load_lens(path), str(path), f"exit lens {path.name} (shipped)")
        except Exception as e:
            log.warning("skipping exit lens %s: %s", path, e)
    return LensChoice(None, None, "no trained exit lens for this target: raw early exit")


# 4) which exit layer

def expected_step_time(layer: int, num_layers: int, hit_rate: float, t_verify: float,
                       t_rollout: float) -> float:
    """One Mirror step (seconds), from the paper's latency model: the target's prefix, then the
    longer of its suffix and the draft's rollouts, plus a serial rollout on a miss."""
    t_suffix = t_verify * (num_layers - layer) / num_layers
    return t_verify + max(0.0, t_rollout - t_suffix) + (1.0 - hit_rate) * t_rollout


def choose_exit_layer(hit_rates: dict[int, float], num_layers: int, t_verify: float,
                      t_rollout: float) -> int:
    """The lens layer with the least expected step time. A later layer proposes better (more
    hits, so fewer serial fallbacks) but leaves less target time to hide the rollouts behind;
    hit_rates are the lens's held-out top-kappa rates (an upper bound on branch hits)."""
    usable = {L: h for L, h in hit_rates.items() if 1 <= L <= num_layers - 1}
    return min(sorted(usable), key=lambda L: expected_step_time(L, num_layers, usable[L],
                                                                t_verify, t_rollout))
