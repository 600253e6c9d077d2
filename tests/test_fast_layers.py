"""fast_layers: a decoder layer in two C++ calls on the AVX2 kernels' models (int8, int4).

Its float sums run in another order than transformers', so the reference for closeness is the
lean forward (transformers' bits) on the same converted model; the guarantees tested bit for
bit are the ones the engine relies on: a verify forward gives the logits of decoding its
tokens one by one, at any thread count, and every decoder's greedy output equals
transformers' generate() on the same model."""
import copy

import pytest
import torch
from transformers import DynamicCache

import tiny
from mirror_sd.cpu import fast_layers
from mirror_sd.cpu import lean_layers
from mirror_sd.models.loading import apply_precision

from test_cpu_kernels import assert_decoders_equal_generate
from test_lean_layers import fp32_model, logits_of_a_run
from test_native_int8 import needs_kernel

pytestmark = needs_kernel
KINDS = ["int8", "int4"]


def converted(arch, kind, seed=3, role="target", **over):
    return apply_precision(fp32_model(arch, seed, **over), kind, role)


def as_lean(model):
    """The same converted model with lean_layers' forward (transformers' arithmetic)."""
    other = copy.deepcopy(model)
    for module in other.modules():
        vars(module).pop("forward", None)
    lean_layers.install(other)
    assert fast_layers.installed(other) == 0
    return other


@pytest.mark.parametrize("arch", ["qwen", "llama"])
@pytest.mark.parametrize("kind", KINDS)
def test_installed_where_it_fits_and_close_to_transformers_arithmetic(arch, kind):
    model = converted(arch, kind)
    assert fast_layers.installed(model) == tiny.LAYERS
    ids = torch.randint(0, tiny.VOCAB, (1, 14), generator=torch.Generator().manual_seed(5))
    fast, lean = logits_of_a_run(model, ids), logits_of_a_run(as_lean(model), ids)
    for a, b in zip(fast, lean):
        assert torch.equal(a.argmax(-1), b.argmax(-1))
        assert (a - b).abs().max() < 1e-3 * b.abs().max()
    for kind_off in ("fp32", "fp16w", "int8-dyn"):
        assert fast_layers.installed(converted(arch, kind_off)) == 0


@torch.inference_mode()
def verify_and_decode(model, context, new):
    out = []
    for one_by_one in (False, True):
        cache = DynamicCache(config=model.config)
        model(torch.tensor([context]), past_key_values=cache, use_cache=True)
        ids = torch.tensor([new])
        if one_by_one:
            out.append(torch.cat([model(ids[:, i:i + 1], past_key_values=cache, use_cache=True).logits[0]
                                  for i in range(len(new))]))
        else:
            out.append(model(ids, past_key_values=cache, use_cache=True).logits[0])
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_verify_equals_decode_bit_for_bit_at_any_thread_count(kind, seed):
    # head dim 128 and 12 query heads over 2 key/value heads, as the real target's
    model = converted("qwen", kind, seed, hidden_size=256, intermediate_size=320,
                      num_attention_heads=2, num_key_value_heads=1)
    context, new = tiny.prompt(seed, 40), tiny.prompt(seed + 5, 7)
    before = torch.get_num_threads()
    try:
        results = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results[threads] = verify_and_decode(model, context, new)
    finally:
        torch.set_num_threads(before)
    verify, decode = results[1]
    assert torch.equal(verify, decode)
    assert torch.equal(results[2][0], verify) and torch.equal(results[2][1], decode)


def test_masks_with_holes_and_eager_masks():
    """A batch over a cache with holes in its mask (as the engine's branch rollouts make)
    gives what transformers' arithmetic gives; transformers' eager attention passes float
    masks where SDPA passes bool ones: the same bits either way."""
    model = converted("qwen", "int4", seed=6, role="draft")  # a target's attention takes no masks
    ids = torch.randint(0, tiny.VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 4:7] = 0  # row 1 must not see tokens 4..6

    @torch.inference_mode()
    def run(m):
        cache = DynamicCache(config=m.config)
        m(ids[:, :9], attention_mask=mask[:, :9], past_key_values=cache, use_cache=True)
        return m(ids[:, 9:], attention_mask=mask, past_key_values=cache, use_cache=True).logits

    fast, lean = run(model), run(as_lean(model))
    assert (fast - lean).abs().max() < 1e-3 * lean.abs().max()
    assert torch.equal(fast.argmax(-1), lean.argmax(-1))
    holes = mask.clone()
    holes[1, 4:7] = 1
    with torch.inference_mode():  # the control: the holes change row 1 only
        cache = DynamicCache(config=model.config)
        model(ids[:, :9], attention_mask=holes[:, :9], past_key_values=cache, use_cache=True)
        seen_all = model(ids[:, 9:], attention_mask=holes, past_key_values=cache, use_cache=True).logits
    assert torch.equal(seen_all[0], fast[0]) and not torch.equal(seen_all[1], fast[1])
    model.config._attn_implementation = "eager"
    for layer in model.model.layers:
        layer.self_attn.config._attn_implementation = "eager"
    eager = run(model)
    assert torch.equal(eager[0], fast[0]) and torch.equal(eager[1], fast[1])


def test_deep_copies_run_their_own_weights():
    model = converted("qwen", "int8")
    twin = copy.deepcopy(model)
    layer = twin.model.layers[0]
    assert layer.forward.__self__ is layer
    twin.model.layers[0].input_layernorm.weight.data.mul_(3.0)
    ids = torch.tensor([tiny.prompt(2, 6)])
    with torch.inference_mode():
        assert not torch.equal(twin(ids).logits, model(ids).logits)


def test_turned_off_by_the_kernel_choice(tmp_path, monkeypatch):
    """fast_layers=False (or the environment's override, read by load_pair) keeps the lean
    forward on the extension's layers."""
    from mirror_sd.models.loading import load_pair
    from mirror_sd.models.precision import KernelChoice
    from test_loading import make_model_dir
    model = apply_precision(fp32_model("qwen", 3), "int4", "target", KernelChoice(fast_layers=False))
    assert fast_layers.installed(model) == 0 and lean_layers.installed(model) == tiny.LAYERS
    tdir, ddir = make_model_dir(tmp_path / "t", layers=2), make_model_dir(tmp_path / "d", layers=1)
    for kwargs, env in (({"fast_layers": False}, "1"), ({}, "0"), ({}, "1")):
        monkeypatch.setenv("MIRROR_SD_FAST_LAYERS", env)
        pair = load_pair(tdir, ddir, precision="int8", target_device="cpu", draft_device="cpu", **kwargs)
        assert fast_layers.installed(pair.target) == (2 if env == "1" and not kwargs else 0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_decoders_equal_generate_on_fast_layers(kind, seed):
    """float32 tiny models (float64 ones keep transformers' forward): AR, SD and Mirror-SD with
    the target and draft on fast layers give what generate() gives on that same target."""
    base = fp32_model("qwen", seed)
    t = apply_precision(copy.deepcopy(base), kind, "target")
    d = apply_precision(tiny.perturb(base, tiny.PERTURB_SCALE, seed + 20_000).float(), kind, "draft")
    assert fast_layers.installed(t) == fast_layers.installed(d) == tiny.LAYERS
    assert_decoders_equal_generate(t, d, seed)
