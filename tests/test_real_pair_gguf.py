"""The bundled models' caches built straight from their GGUF files (models/quantized.py): an int8
model loaded from its int8 cache computes, bit for bit, the logits of the fp32 folder loaded and
quantized (the path every other precision takes), for the default target and draft and for
Gemma 3 270M; and the fp32 folder holds transformers' own dequantized values."""
import pytest
import torch

from mirror_sd.models import bundled
from mirror_sd.models.loading import load_model

pytestmark = pytest.mark.real_pair

PROMPT = "Write a Python function that reverses a list."


def both(name: str, role: str, model: bundled.BundledModel):
    """(int8 from the int8 cache, int8 from the fp32 folder) for one bundled model."""
    direct = load_model(name, role, precision="int8")
    assert direct.source.path.endswith("-int8")  # the int8 cache, not the fp32 folder
    fp32_dir = bundled.ensure_bundled(model, kind="fp32")
    through_fp32 = load_model(str(fp32_dir), role, precision="int8", tokenizer=False)
    return direct, through_fp32.model


@pytest.mark.parametrize("name,role,model", [
    ("default", "target", bundled.DEFAULT_TARGET),
    ("default", "draft", bundled.DEFAULT_DRAFT),
    ("gemma-3-270m", "draft", bundled.GEMMA_3_270M)])
def test_int8_from_the_gguf_equals_int8_from_the_fp32_folder(name, role, model):
    direct, reference = both(name, role, model)
    ids = direct.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        ours, theirs = direct.model(ids).logits, reference(ids).logits
    assert torch.equal(ours, theirs)
    assert str(direct.model) == str(reference)  # the same kernels in the same places
    assert ours[0, -1].argmax() == theirs[0, -1].argmax()


def test_fp32_folder_holds_transformers_own_values_for_the_draft(tmp_path):
    """The draft's fp32 folder (built tensor by tensor) against transformers' own GGUF load."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    folder = bundled.ensure_bundled(bundled.DEFAULT_DRAFT, kind="fp32")
    gguf = bundled._assemble(bundled.DEFAULT_DRAFT, tmp_path, None)
    ref = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=gguf.name,
                                               dtype=torch.float32).state_dict()
    ours = {}
    for f in folder.glob("*.safetensors"):
        ours.update(load_file(str(f)))
    assert set(ours) == set(ref)
    assert [k for k in ref if not torch.equal(ours[k], ref[k])] == []
