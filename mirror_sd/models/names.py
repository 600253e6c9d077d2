"""A model name (a hub id, a local folder, a .gguf file) -> a checked `Source`, and what can
be read about it before its weights are: parameter count and vocabulary size.

"default" and the bundled models' names ("gemma-3-270m"...: `bundled.BUNDLED`) are resolved by
`bundled.py` (through `loading`); this module handles every other name.
Checks that fail here fail fast, before anything is loaded: a missing path, a folder that is not
a model, a hub id that does not exist or cannot be reached, a model that needs custom code.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mirror_sd.errors import MirrorSDError

log = logging.getLogger(__name__)

HUB_TIMEOUT_S = 10  # one metadata request; transformers' own download retries take ~25 s


@dataclass
class Source:
    """Where a model's files are, as `from_pretrained` takes them."""
    name: str  # as the user gave it, for messages
    path: str  # a folder, the folder of a .gguf, or a hub id
    gguf_file: str | None = None
    hub: bool = False
    local_only: bool = False  # a hub id usable only from the local cache (offline)
    extra: dict = field(default_factory=dict)

    def kwargs(self) -> dict:
        kw = dict(self.extra)
        if self.gguf_file:
            kw["gguf_file"] = self.gguf_file
        if self.local_only:
            kw["local_files_only"] = True
        return kw


def _looks_like_path(name: str) -> bool:
    return (name.endswith(".gguf") or name.startswith(("/", ".", "~")) or "\\" in name
            or name.count("/") > 1 or os.path.isabs(name))


def no_network(name: str) -> MirrorSDError:
    return MirrorSDError(f"Could not download {name!r} from the Hugging Face hub (no network?), "
                         f"and it is not in the local cache.")


def _probe_hub(repo: str, role: str, trust_remote_code: bool, extra: dict) -> bool:
    """Check a hub id quickly; return True when only the local cache can serve it.

    transformers retries an unreachable hub for ~25 s, so ask once with a short timeout and,
    if that fails, fall back to files already in the local cache (no retries)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (GatedRepoError, HFValidationError,
                                        RepositoryNotFoundError)

    if not os.environ.get("HF_HUB_OFFLINE"):
        try:
            HfApi().model_info(repo, timeout=HUB_TIMEOUT_S)
            return False
        except GatedRepoError:
            raise MirrorSDError(f"The {role} model {repo!r} is gated: accept its license on "
                                f"huggingface.co and log in with `hf auth login`.") from None
        except RepositoryNotFoundError:
            raise MirrorSDError(f"The {role} model {repo!r} was not found on the Hugging Face "
                                f"hub: check the name (private models need a login).") from None
        except HFValidationError:
            raise MirrorSDError(f"The {role} model {repo!r} is neither an existing local path "
                                f"nor a valid Hugging Face hub id.") from None
        except Exception as e:  # connection errors come from httpx/requests/OSError
            log.warning("hub unreachable for %s (%s): trying the local cache", repo, e)
    from transformers import AutoConfig
    try:
        AutoConfig.from_pretrained(repo, local_files_only=True,
                                   trust_remote_code=trust_remote_code, **extra)
    except Exception:
        raise no_network(repo) from None
    return True


def resolve(name: str, role: str, trust_remote_code: bool = False, cache_dir=None) -> Source:
    """The Source of a hub id, a local model folder or a .gguf file, or a MirrorSDError saying
    why there is none. `cache_dir`: hub downloads go under `<cache_dir>/hub`."""
    p = Path(name).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise MirrorSDError(f"The {role} folder {name!r} has no config.json: it is not a "
                                f"Hugging Face model folder.")
        return Source(name, str(p))
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise MirrorSDError(f"The {role} file {name!r} is not a .gguf model: give a .gguf "
                                f"file, a model folder or a hub id.")
        return Source(name, str(p.parent), gguf_file=p.name)
    if _looks_like_path(name):
        raise MirrorSDError(f"The {role} model path {name!r} does not exist.")
    extra = {"cache_dir": str(Path(cache_dir).expanduser() / "hub")} if cache_dir else {}
    local_only = _probe_hub(name, role, trust_remote_code, extra)
    return Source(name, name, hub=True, local_only=local_only, extra=extra)


def gguf_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes (GGUF order: fastest dimension first) from a GGUF header.

    gguf.GGUFReader and transformers' GGUF config both take 20-60 s here (they decode the
    150k-token vocabulary); skipping the metadata values takes a fraction of a second."""
    import mmap
    import struct

    from mirror_sd.models.gguf_read import _skip_value
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            raise MirrorSDError(f"{path} is not a GGUF file (bad magic bytes).")
        pos = 8
        n_tensors, n_kv = struct.unpack_from("<QQ", m, pos)
        pos += 16

        for _ in range(n_kv):
            pos = _skip_value(m, pos, 8)  # the key
            vtype = struct.unpack_from("<I", m, pos)[0]
            pos = _skip_value(m, pos + 4, vtype)
        shapes = {}
        for _ in range(n_tensors):
            n = struct.unpack_from("<Q", m, pos)[0]
            name = m[pos + 8:pos + 8 + n].decode()
            pos += 8 + n
            n_dims = struct.unpack_from("<I", m, pos)[0]
            shapes[name] = struct.unpack_from(f"<{n_dims}Q", m, pos + 4)
            pos += 4 + 8 * n_dims + 4 + 8  # dims, ggml type, data offset
    return shapes


def gguf_inspect(path: Path) -> tuple[int, int | None]:
    """(parameter count, vocabulary size) of a GGUF model."""
    shapes = gguf_shapes(path)
    params = sum(math.prod(s) for s in shapes.values())
    emb = shapes.get("output.weight") or shapes.get("token_embd.weight")
    return params, (int(emb[-1]) if emb else None)


def inspect(src: Source, role: str, trust_remote_code: bool) -> tuple[int, int | None]:
    """(parameter count, vocabulary size or None) without reading the weights."""
    if src.gguf_file:
        return gguf_inspect(Path(src.path) / src.gguf_file)
    from transformers import AutoConfig, AutoModelForCausalLM
    try:
        config = AutoConfig.from_pretrained(src.path, trust_remote_code=trust_remote_code,
                                            **src.kwargs())
        with torch.device("meta"):  # shapes only: no memory, no time
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception as e:
        raise load_error(src, role, e) from None
    vocab = model.get_output_embeddings().weight.shape[0]
    return sum(p.numel() for p in model.parameters()), int(vocab)


def load_error(src: Source, role: str, e: Exception) -> MirrorSDError:
    """What to tell the user when transformers could not read `src`."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "trust_remote_code" in str(e):
        return MirrorSDError(f"The {role} model {src.name!r} needs custom code from its "
                             f"repository: pass trust_remote_code=True only if you trust it.")
    if src.hub and isinstance(e, OSError):
        return no_network(src.name)
    return MirrorSDError(f"Could not load the {role} model from {src.name!r}: {text}")
