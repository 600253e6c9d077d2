"""Caches built straight from a GGUF, tensor by tensor (models/gguf_read.py, models/quantized.py),
on tiny GGUF files written in the test: the values are transformers' own (from_pretrained with
gguf_file), the int8 / int4 models loaded from their caches give the bits of quantizing an fp32
load, and the one-time preparation reports its steps. The real pair: test_real_pair_int8.py."""
import json

import pytest
import torch

import tiny_gguf
from mirror_sd.cpu import int8 as native_int8
from mirror_sd.models import bundled, quantized
from mirror_sd.models.gguf_read import GgufFile
from mirror_sd.models.precision import KernelChoice, apply_precision

needs_kernels = pytest.mark.skipif(not native_int8.available(),
                                   reason=f"AVX2 kernels: {native_int8.unavailable_reason()}")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return {"untied": tiny_gguf.write_qwen2(root / "untied.gguf", seed=1),
            "tied": tiny_gguf.write_qwen2(root / "tied.gguf", seed=2, tied=True)}


def reference(path, dtype=torch.float32):
    """transformers' own load of the GGUF (dequantized to fp32)."""
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)


def cache(tmp_path, path, kind):
    return quantized.build_cache(path, tmp_path / f"{path.stem}-{kind}", kind, tmp_path / "tok")


def tensors(folder):
    from safetensors.torch import load_file
    out = {}
    for f in folder.glob("*.safetensors"):
        out.update(load_file(str(f)))
    return out


@pytest.mark.parametrize("shape", [(7, 5), (33, 100), (64, 96), (3, 32), (1, 1)])
@needs_kernels
def test_torch_quantize_weight_is_the_kernels_bit_for_bit(shape):
    torch.manual_seed(shape[0])
    w = torch.randn(shape) * torch.rand(shape[0], 1) * 3
    w[0] = 0  # an all-zero row: scale 1
    if shape[1] > 2:
        w[-1, :2] = torch.tensor([1.0, 127.5 / 127])  # a value at a rounding tie (x.5)
    ext = native_int8.load().quantize_weight(w)
    ours = native_int8.quantize_weight(w)
    assert all(torch.equal(a, b) for a, b in zip(ext, ours))
    assert ours[0].shape[1] % native_int8.ALIGN == 0 and ours[0].dtype == torch.int8


@pytest.mark.parametrize("which", ["untied", "tied"])
def test_fp32_cache_holds_transformers_values_and_config(files, tmp_path, which):
    path = files[which]
    folder = cache(tmp_path, path, "fp32")
    ref = reference(path)
    ours = tensors(folder)
    expected = {k: v for k, v in ref.state_dict().items()
                if not (which == "tied" and k == "lm_head.weight")}  # tied: not stored
    assert set(ours) == set(expected)
    assert all(torch.equal(ours[k], v) for k, v in expected.items())
    config = json.loads((folder / "config.json").read_text())
    for key, value in ref.config.to_diff_dict().items():
        if key not in ("transformers_version", "dtype", "_name_or_path", "quantization_config"):
            assert config.get(key) == value, key
    from transformers import AutoModelForCausalLM
    loaded = AutoModelForCausalLM.from_pretrained(str(folder))  # a folder transformers loads
    ids = torch.tensor([[1, 5, 9, 200, 260]])
    with torch.inference_mode():
        assert torch.equal(loaded(ids).logits, ref(ids).logits)


@needs_kernels
@pytest.mark.parametrize("which,kind,role", [("untied", "int8", "target"), ("tied", "int8", "draft"),
                                             ("untied", "int4", "draft"), ("tied", "int4", "target")])
def test_quantized_cache_gives_the_bits_of_quantizing_an_fp32_load(files, tmp_path, which, kind,
                                                                     role):
    path = files[which]
    folder = cache(tmp_path, path, kind)
    assert quantized.cache_info(folder)["kind"] == kind
    ours = quantized.load_cache(folder, kind, role, KernelChoice())
    ref = apply_precision(reference(path).eval(), kind, role, KernelChoice())
    assert quantized.cache_info(folder)["params"] == sum(p.numel() for p in reference(path).parameters())
    assert str(ours) == str(ref)  # the same layers (fused projections, kernels) in the same places
    ids = torch.tensor([[1, 5, 9, 200, 260, 7, 7, 42]])
    with torch.inference_mode():
        assert torch.equal(ours(ids).logits, ref(ids).logits)
    assert not any(t.is_meta for t in (*ours.parameters(), *ours.buffers()))


def test_int8_cache_holds_no_float_linear_weight(files, tmp_path):
    folder = cache(tmp_path, files["untied"], "int8")
    stored = tensors(folder)
    assert "lm_head.qweight" in stored and "model.layers.0.self_attn.q_proj.qweight" in stored
    assert not [k for k, v in stored.items() if k.endswith(".weight") and v.dim() == 2
                and "embed_tokens" not in k]
    assert stored["model.embed_tokens.weight.grouped_q"].dtype == torch.int8  # Q8_0 blocks


def test_config_and_tokenizer_come_from_the_metadata(files, tmp_path):
    from transformers import AutoTokenizer
    path = files["untied"]
    folder = cache(tmp_path, path, "int8")
    ref = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ours = AutoTokenizer.from_pretrained(str(folder))
    text = "the cat<|im_end|> re in"
    assert ours(text).input_ids == ref(text).input_ids
    assert ours.eos_token == ref.eos_token == "<|im_end|>"
    assert ours.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == \
        ref.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    # the same tokenizer metadata, the same digest: built once for both files
    assert GgufFile(path).tokenizer_digest() == GgufFile(files["tied"]).tokenizer_digest()


def test_row_blocks_give_the_whole_tensors_values(files, tmp_path, monkeypatch):
    """A tensor dequantized in row blocks (large embeddings) gives the values of one piece."""
    whole = tensors(cache(tmp_path / "a", files["untied"], "fp32"))
    monkeypatch.setattr(quantized, "ROW_BLOCK", 7)
    blocks = tensors(cache(tmp_path / "b", files["untied"], "fp32"))
    assert all(torch.equal(whole[k], blocks[k]) for k in whole)


def test_preparation_steps_report_user_terms_and_a_measured_estimate(monkeypatch):
    messages = []
    clock = [100.0]
    monkeypatch.setattr(bundled.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(bundled.Steps, "rates", {})
    steps = bundled.Steps(lambda m, f: messages.append((m, f)), 3, 0.0, 0.9)
    tick = steps.step("quantizing the draft to int8", "int8", 1000)
    assert messages[-1][0] == ("Preparing the models, once per machine: step 1 of 3, quantizing "
                               "the draft to int8")
    clock[0] += 4
    tick(0.25)  # 4 s for a quarter: about 12 s left
    assert messages[-1][0].endswith("quantizing the draft to int8 (about 12 s left on this machine)")
    assert messages[-1][1] == pytest.approx(0.9 * 0.25 / 3)
    clock[0] += 12
    tick(1.0)
    tick = steps.step("quantizing the target to int8", "int8", 3000)  # 1000 bytes took 16 s
    assert messages[-1][0].endswith("step 2 of 3, quantizing the target to int8 (about 48 s left "
                                    "on this machine)")
    assert all(0 <= f <= 0.9 for _, f in messages)


def test_ensure_bundled_builds_only_the_kind_asked_for(bundled_tiny, tmp_path, monkeypatch):
    model = bundled_tiny
    messages = []
    folder = bundled.ensure_bundled(model, tmp_path, lambda m, f: messages.append(m), "int8",
                                    "the draft")
    assert folder == tmp_path / "tiny-qwen2-int8" and bundled.is_built(model, "int8", tmp_path)
    assert not bundled.is_built(model, "fp32", tmp_path)  # nothing converted that is not used
    assert not (tmp_path / "tiny-qwen2.gguf").exists()  # the cache replaces the GGUF
    assert list((tmp_path / "tokenizers").iterdir())  # tokenizer files kept for the next model
    assert messages[0].startswith("Preparing the models, once per machine: step 1 of 1, "
                                  "quantizing the draft to int8")

    def assemble_again(*args):
        raise AssertionError("a built cache was assembled again")
    monkeypatch.setattr(bundled, "_assemble", assemble_again)
    assert bundled.ensure_bundled(model, tmp_path, None, "int8") == folder  # built: nothing redone


@pytest.fixture
def bundled_tiny(files, tmp_path, monkeypatch):
    """A bundled model whose 'packages' assemble into the tiny GGUF, under the name tiny-qwen2."""
    gguf = files["untied"]
    model = bundled.BundledModel("tiny-qwen2", ("unused",), gguf.stat().st_size)

    def assemble(m, cache, progress):
        out = cache / f"{m.stem}.gguf"
        out.write_bytes(gguf.read_bytes())
        return out

    monkeypatch.setattr(bundled, "_assemble", assemble)
    monkeypatch.setitem(bundled.BUNDLED, "tiny-qwen2", model)
    return model


@needs_kernels
def test_load_pair_at_int8_builds_and_loads_the_int8_cache_only(bundled_tiny, files, tmp_path):
    from mirror_sd.models.loading import load_pair
    messages = []
    pair = load_pair("tiny-qwen2", "tiny-qwen2", precision="int8", cache_dir=tmp_path,
                     target_device="cpu", draft_device="cpu",
                     progress=lambda m, f: messages.append((m, f)))
    assert bundled.is_built(bundled_tiny, "int8", tmp_path)
    assert not bundled.is_built(bundled_tiny, "fp32", tmp_path)
    assert messages[1][0].startswith("Preparing the models, once per machine: step 1 of 2, "
                                      "quantizing the draft to int8")
    assert any(m.startswith("Preparing the models, once per machine: step 2 of 2, loading the "
                            "target (int8, ") for m, _ in messages)
    assert messages[-1] == ("Loading the models: done", 1.0)
    fractions = [f for _, f in messages if f is not None]
    assert fractions == sorted(fractions)  # the bar only moves forward
    quantized_load = apply_precision(reference(files["untied"]).eval(), "int8", "target",
                                     KernelChoice())
    ids = torch.tensor([pair.encode_prompt("the cat")])
    with torch.inference_mode():
        assert torch.equal(pair.target(ids).logits, quantized_load(ids).logits)
    messages.clear()
    load_pair("tiny-qwen2", "tiny-qwen2", precision="int8", cache_dir=tmp_path,
              progress=lambda m, f: messages.append((m, f)))
    assert all(m.startswith("Loading the models: ") for m, _ in messages)  # nothing prepared


def test_without_the_kernels_int8_loads_the_fp32_folder_on_fbgemm(bundled_tiny, tmp_path,
                                                                  monkeypatch):
    from mirror_sd.cpu.linears import RowInt8Linear
    from mirror_sd.models.loading import load_model
    monkeypatch.setattr(native_int8, "_state", {"module": None, "reason": "no compiler (test)"})
    loaded = load_model("tiny-qwen2", "target", precision="int8", cache_dir=tmp_path,
                        tokenizer=False)
    assert loaded.source.path.endswith("-hf")
    assert isinstance(loaded.model.lm_head, RowInt8Linear)


def test_embeddings_are_kept_as_their_blocks_and_come_back_exact(files, tmp_path):
    """Q8_0 / Q5_0 / Q4_K embeddings are stored as their integers and group scales (a quarter of
    the float32 bytes) and give back gguf's dequantized values bit for bit."""
    from mirror_sd.models.gguf_read import grouped, ungroup
    for qtype in ("Q8_0", "Q5_0", "Q4_K"):
        path = tiny_gguf.write_qwen2(tmp_path / f"{qtype}.gguf", seed=3,
                                     types={"token_embd": qtype}, hidden=256)
        gguf = GgufFile(path)
        embd = next(t for t in gguf.tensors if t.name == "token_embd.weight")
        values = torch.from_numpy(gguf.dequantized(embd))
        parts = grouped(gguf, embd, values)
        assert parts is not None and torch.equal(ungroup(parts), values)
        assert sum(p.numel() * p.element_size() for p in parts.values()) < values.numel() * 4 / 3
        stored = tensors(cache(tmp_path, path, "int8"))
        assert "model.embed_tokens.weight.grouped_q" in stored
        assert "model.embed_tokens.weight" not in stored
        # a value the blocks do not give (a processor that changed it) keeps the float tensor
        assert grouped(gguf, embd, values + 1) is None
