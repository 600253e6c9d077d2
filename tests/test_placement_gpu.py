"""Device configurations for a GPU host (mirror_sd/placement.py), decided and checked on faked
device lists: torch's CUDA queries monkeypatched, or an injected DeviceInventory."""
import argparse

import pytest
import torch

from mirror_sd import placement as pl
from mirror_sd.errors import MirrorSDError
from mirror_sd.options import add_model_options, model_kwargs

GIB = 1024 ** 3
CPU_ONLY = pl.DeviceInventory(ram_free_bytes=16 * GIB)
ONE_GPU = pl.DeviceInventory(ram_free_bytes=16 * GIB, gpus=(pl.GPU("cuda:0", 70 * GIB, 80 * GIB),))
SMALL_GPU = pl.DeviceInventory(ram_free_bytes=16 * GIB, gpus=(pl.GPU("cuda:0", 2 * GIB, 8 * GIB),))


@pytest.fixture
def fake_gpus(monkeypatch):
    """torch reports `n` CUDA GPUs with the given free memory (no GPU is touched)."""
    def install(n: int, free: int = 40 * GIB, total: int = 80 * GIB):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (free, total))
    return install


def test_inventory_reads_torchs_gpus_and_their_free_memory(fake_gpus):
    fake_gpus(2, free=30 * GIB)
    inv = pl.device_inventory()
    assert [g.name for g in inv.gpus] == ["cuda:0", "cuda:1"]
    assert inv.free_bytes("cuda:1") == 30 * GIB and inv.free_bytes("cpu") == inv.ram_free_bytes > 0
    fake_gpus(0)
    assert pl.device_inventory().gpus == ()


@pytest.mark.parametrize("name, devices", [
    ("cpu", ("cpu", "cpu")),
    ("gpu-streams", ("cuda:0", "cuda:0")),
    ("target-gpu-draft-cpu", ("cuda:0", "cpu")),
    ("draft-gpu-target-cpu", ("cpu", "cuda:0")),
    ("auto", ("auto", "auto")),
])
def test_each_configuration_names_its_devices_on_a_one_gpu_host(name, devices):
    assert pl.configuration_devices(name, ONE_GPU) == devices


@pytest.mark.parametrize("name", pl.GPU_CONFIGURATIONS)
def test_gpu_configurations_are_refused_without_a_gpu_with_the_reason(name):
    with pytest.raises(MirrorSDError, match=rf"'{name}' needs a CUDA GPU.*sees none"):
        pl.configuration_devices(name, CPU_ONLY)
    assert pl.available_configurations(CPU_ONLY) == ["auto", "cpu"]
    assert name in pl.available_configurations(ONE_GPU)


def test_unknown_configuration_lists_the_known_ones():
    with pytest.raises(MirrorSDError, match="gpu-streams"):
        pl.configuration_devices("two-gpus", ONE_GPU)


def test_memory_is_checked_per_device_before_loading():
    needs = {"target": 3 * GIB, "draft": 1 * GIB}  # weights: a 1.5B target, 0.5B draft in fp16
    assert pl.configuration_devices("gpu-streams", ONE_GPU, needs) == ("cuda:0", "cuda:0")
    with pytest.raises(MirrorSDError, match=r"about 4\.6 GiB of memory on cuda:0 but only 2\.0 GiB"):
        pl.configuration_devices("gpu-streams", SMALL_GPU, needs)
    # the draft alone fits the small GPU; the target goes to the RAM
    assert pl.configuration_devices("draft-gpu-target-cpu", SMALL_GPU, needs) == ("cpu", "cuda:0")
    with pytest.raises(MirrorSDError, match="of RAM"):
        pl.configuration_devices("cpu", SMALL_GPU, {"target": 20 * GIB})


def test_chosen_devices_resolve_to_lanes_and_threads(fake_gpus):
    fake_gpus(1)
    for name in pl.GPU_CONFIGURATIONS:
        tdev, ddev = pl.configuration_devices(name)
        p = pl.resolve_placement(tdev, ddev)
        assert (p.target_device, p.draft_device) == (tdev, ddev)
        # a lane alone on the CPU gets every core; a GPU lane one thread
        assert p.draft_threads == (pl.cpu_cores() if ddev == "cpu" else 1)
        assert p.target_threads == (pl.cpu_cores() if tdev == "cpu" else 1)


def _args(*argv):
    p = argparse.ArgumentParser()
    add_model_options(p)
    return p.parse_args(list(argv))


def test_placement_flag_sets_both_devices_and_the_old_flags_still_work(fake_gpus):
    a = _args("--placement", "target-gpu-draft-cpu")
    assert (a.placement, a.target_device, a.draft_device) == ("target-gpu-draft-cpu", "cuda", "cpu")
    a = _args("--placement", "gpu-streams", "--draft-device", "cpu")  # a later flag overrides
    assert (a.target_device, a.draft_device) == ("cuda", "cpu")
    a = _args("--target-device", "cpu", "--draft-device", "cpu")
    assert a.placement == "auto" and model_kwargs(a)["target_device"] == "cpu"
    fake_gpus(0)
    with pytest.raises(MirrorSDError, match="needs a CUDA GPU"):
        model_kwargs(_args("--placement", "draft-gpu-target-cpu"))
    fake_gpus(1)
    assert model_kwargs(_args("--placement", "draft-gpu-target-cpu"))["draft_device"] == "cuda"


def test_the_overlap_gate_measures_wherever_both_lanes_share_one_device(fake_gpus, monkeypatch):
    """Both lanes on one GPU (a stream each, one process launching both) or on one CPU's
    cores: the gate measures and may run them one after the other. A lane on a device of its
    own: always overlapped."""
    from types import SimpleNamespace
    fake_gpus(1)
    monkeypatch.setattr(pl, "cpu_cores", lambda: 2)
    share = {}
    for name in ("cpu",) + pl.GPU_CONFIGURATIONS:
        p = pl.resolve_placement(*pl.configuration_devices(name))
        share[name] = pl.lanes_share_a_device(SimpleNamespace(info={"placement": p}))
    assert share == {"cpu": True, "gpu-streams": True, "target-gpu-draft-cpu": False,
                     "draft-gpu-target-cpu": False}
    assert not pl.lanes_share_a_device(SimpleNamespace(info={}))  # no placement recorded
