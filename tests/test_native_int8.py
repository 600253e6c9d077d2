"""native_int8: the AVX2 row-exact int8 kernel (built on first use) and its fallback."""
import shutil
import subprocess
import sys
import threading
import time

import pytest
import torch

from mirror_sd.cpu import linears as cpu_kernels
from mirror_sd.cpu import int8 as native_int8

CAN_BUILD = shutil.which("g++") is not None and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
needs_kernel = pytest.mark.skipif(not CAN_BUILD, reason="no g++ or no AVX2 here")


@needs_kernel
def test_builds_where_a_compiler_and_avx2_exist():
    assert native_int8.available(), native_int8.unavailable_reason()
    assert cpu_kernels.row_kernel() is native_int8.NativeInt8Linear
    assert cpu_kernels.row_kernel(native=False) is cpu_kernels.RowInt8Linear



@needs_kernel
def test_a_build_killed_half_way_does_not_hang_the_next_one():
    """torch's own guard is a plain `lock` file: a build killed before it removed it made every
    later load wait forever. Plant one where the kernel builds; a new process still loads."""
    assert native_int8.available(), native_int8.unavailable_reason()
    folder = native_int8.build_dir()
    (folder / "lock").touch()
    code = "from mirror_sd.cpu import int8; print(int8.available(), int8.unavailable_reason())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.stdout.split() == ["True", "None"], out.stdout + out.stderr
    assert not (folder / "lock").exists()


def test_the_build_lock_serialises_builders_and_clears_a_dead_builders_lock(tmp_path):
    (tmp_path / "lock").touch()
    order = []
    with native_int8.build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()

        def second():
            with native_int8.build_lock(tmp_path):
                order.append("second")
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        order.append("first")
    t.join(10)
    assert order == ["first", "second"]


def test_the_build_folder_is_named_by_the_sources(tmp_path, monkeypatch):
    a = native_int8.build_dir(tmp_path)
    assert a == native_int8.build_dir(tmp_path)  # stable: every checkout shares it
    src = tmp_path / "module.cpp"
    src.write_text("// changed")
    monkeypatch.setattr(native_int8, "SOURCES", [src, *native_int8.SOURCES[1:]])
    assert native_int8.build_dir(tmp_path) != a

def layer(out_f, in_f, bias, seed=0):
    g = torch.Generator().manual_seed(seed)
    lin = torch.nn.Linear(in_f, out_f, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(out_f, in_f, generator=g) * 0.05)
        if bias:
            lin.bias.copy_(torch.randn(out_f, generator=g))
    return lin


@needs_kernel
@pytest.mark.parametrize("in_f", [7, 32, 100, 1000])  # K below, at and off the 32-byte vector
@pytest.mark.parametrize("bias", [False, True])
def test_each_row_has_its_own_bits_in_any_batch(in_f, bias):
    assert_rows_independent(native_int8.NativeInt8Linear(layer(70, in_f, bias)), in_f)


def assert_rows_independent(lin, in_f):
    """Each row of a batch gets the bits it gets alone or next to any other rows."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, in_f, generator=g)  # 9 rows: a full row block (int8: 8, int4: 4) and a remainder
    x[0] *= 1e4
    x[5] *= 1e-4
    together = lin(x)
    for i in range(9):
        assert torch.equal(lin(x[i:i + 1])[0], together[i])
    assert torch.equal(lin(x[3:7]), together[3:7])
    neighbours = torch.cat([torch.randn(2, in_f, generator=g) * 300, x[4:5]])
    assert torch.equal(lin(neighbours)[2], together[4])


@needs_kernel
def test_close_to_fp32_and_exact_on_integer_grids():
    lin = layer(300, 512, True)
    x = torch.randn(5, 512)
    with torch.no_grad():
        ref = lin(x)
        err = (native_int8.NativeInt8Linear(lin)(x) - ref).norm() / ref.norm()
    assert err < 0.03
    # weights and inputs already on the int8 grids: the int32 sums are exact
    exact = torch.nn.Linear(64, 3, bias=False)
    with torch.no_grad():
        exact.weight.copy_(torch.randint(-127, 128, (3, 64)).float())
        exact.weight[:, 0] = 127.0
        xi = torch.randint(-63, 64, (2, 64)).float()
        xi[:, 1] = 63.0
        assert torch.equal(native_int8.NativeInt8Linear(exact)(xi), exact(xi))


@needs_kernel
def test_zero_and_non_finite_rows():
    lin = native_int8.NativeInt8Linear(layer(16, 40, True))
    x = torch.zeros(3, 40)
    x[1, 3] = float("nan")
    x[2, 5] = 2.0
    y = lin(x)
    assert torch.equal(y[0], lin.bias)  # an all-zero row: only the bias
    assert torch.isnan(y[1]).all()  # a NaN is not hidden
    assert torch.isfinite(y[2]).all()


@needs_kernel
def test_a_layer_deep_copies_and_saves():
    import copy
    import io
    lin = native_int8.NativeInt8Linear(layer(8, 40, True))
    x = torch.randn(2, 40)
    assert torch.equal(copy.deepcopy(lin)(x), lin(x))
    torch.save(lin.state_dict(), io.BytesIO())


@needs_kernel
def test_rows_keep_the_full_layers_outputs():
    lin = native_int8.NativeInt8Linear(layer(200, 96, True))
    ids = torch.tensor([0, 5, 77, 199])
    x = torch.randn(3, 96)
    assert torch.equal(cpu_kernels.output_rows(lin, ids)(x), lin(x)[:, ids])


@pytest.mark.parametrize("kwargs,env", [({"kernels": "fbgemm"}, "1"), ({}, "0")])
def test_fbgemm_kernels_asked_for_keep_the_extension_out(tmp_path, monkeypatch, kwargs, env):
    """kernels="fbgemm" (or the environment's override, read by load_pair) converts int8 with
    fbgemm's RowInt8Linear, and nothing is put on the extension's fast layers."""
    from mirror_sd.cpu import fast_layers
    from mirror_sd.models.loading import load_pair
    from test_loading import make_model_dir
    monkeypatch.setenv("MIRROR_SD_NATIVE_INT8", env)
    tdir, ddir = make_model_dir(tmp_path / "t", layers=2), make_model_dir(tmp_path / "d", layers=1)
    pair = load_pair(tdir, ddir, precision="int8", target_device="cpu", draft_device="cpu", **kwargs)
    for model in (pair.target, pair.draft):
        kinds = {type(m) for m in model.modules()}
        assert cpu_kernels.RowInt8Linear in kinds and native_int8.NativeInt8Linear not in kinds
        assert fast_layers.installed(model) == 0
