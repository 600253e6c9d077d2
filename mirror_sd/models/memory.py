"""Memory: the check made before any weights are read, and giving back the pages of a
converted model's float32 source.

A converted model should not keep its fp32 source in memory. transformers maps the safetensors
file (one private mapping) and the parameters point into it, so every page the conversion reads
stays mapped, counted in the process's RSS, as long as the mapping lives (the embeddings and
norms keep it): loading the int8 / int8-dyn default pair peaked at 10.6 GB and kept 10.4 GB,
7.7 GB of it fp32 file pages (docs/performance.md). `precision.convert_lean` converts one
decoder layer at a time and, with `drop_pages`, gives back the pages of each fp32 weight once
converted. What stays in the file (embeddings, norms) stays there: an embedding lookup reads
only the rows it needs, and those pages are the kernel's to reclaim.
"""
from __future__ import annotations

import torch

from mirror_sd.errors import MirrorSDError
from mirror_sd.placement import GIB, HEADROOM, Placement


def pool(device) -> str:
    """Which memory a device draws on: cpu and mps share the RAM; each GPU has its own."""
    if isinstance(device, dict) or device == "auto":
        return "gpus"
    return "ram" if str(device) in ("cpu", "mps") else str(device)


def _available(pool_name: str, placement: Placement | None) -> int:
    if pool_name == "ram":
        import psutil
        return int(psutil.virtual_memory().available)
    if pool_name == "gpus":
        mm = (placement.max_memory if placement else None) or {}
        gpus = [k for k in mm if isinstance(k, int)] or range(torch.cuda.device_count())
        return sum(torch.cuda.mem_get_info(i)[0] for i in gpus)
    return int(torch.cuda.mem_get_info(torch.device(pool_name))[0])


def check_memory(needs: dict[str, float], limit: int | None, what: str,
                 placement: Placement | None = None) -> None:
    """Raise MirrorSDError when a pool's need (bytes, plus HEADROOM) exceeds what it has free
    (or `limit`, when given)."""
    for pool_name, need in needs.items():
        avail = limit if limit is not None else _available(pool_name, placement)
        if need * HEADROOM > avail:
            where = "RAM" if pool_name == "ram" else f"{pool_name} memory"
            raise MirrorSDError(f"{what} about {need * HEADROOM / GIB:.1f} GiB of {where} but "
                                f"only {avail / GIB:.1f} GiB is available: pick smaller models, "
                                f"a lower precision, or free some memory.")


def mapped_files() -> list[tuple[int, int]]:
    """Address ranges of the files mapped into this process (Linux; else []). The weights of a
    safetensors load lie in one (a hub download's is a blob without the .safetensors name)."""
    ranges = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)  # range, perms, offset, device, inode, path
                if len(parts) == 6 and parts[4] != "0" and parts[5].startswith("/"):
                    lo, hi = parts[0].split("-")
                    ranges.append((int(lo, 16), int(hi, 16)))
    except OSError:
        pass
    return ranges


def span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def in_files(s: tuple[int, int], files: list[tuple[int, int]]) -> bool:
    return any(lo <= s[0] and s[1] <= hi for lo, hi in files)


def _live_spans(model) -> list[tuple[int, int]]:
    return [span(t) for t in (*model.parameters(), *model.buffers()) if t.device.type == "cpu"]


def drop_pages(dead: list[tuple[int, int]], model, files: list[tuple[int, int]]) -> None:
    """Give back the resident pages of file-mapped tensors the model no longer uses: whole
    pages inside each dead span, none shared with a parameter or buffer still in the model.
    Loaded weights are never written, so those pages hold the file's bytes: a later read by
    anything still holding such a tensor would fault the same bytes back in."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    live = [s for s in _live_spans(model) if in_files(s, files)]
    page = mmap.PAGESIZE
    for lo, hi in dead:
        if not in_files((lo, hi), files):
            continue  # anonymous memory: the allocator frees it, never madvise it
        a, b = -(-lo // page) * page, hi // page * page
        if b > a and not any(l < b and a < h for l, h in live):
            libc.madvise(ctypes.c_void_p(a), ctypes.c_size_t(b - a), 4)  # MADV_DONTNEED
