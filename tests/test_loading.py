"""load_pair / placement checks on tiny models built in code: no downloads, a few seconds.

The `real_pair` test builds (first time: minutes) and loads the bundled default pair."""
import json
import time

import pytest
import torch
from tiny import tiny_tokenizer
from transformers import Qwen2Config, Qwen2ForCausalLM

from mirror_sd import placement as placement_mod
from mirror_sd.errors import MirrorSDError
from mirror_sd.models.loading import ensure_default_pair, load_pair
from mirror_sd.placement import configure_cpu_threads, lane_sync, resolve_placement


def make_model_dir(path, vocab=300, layers=2, tokenizer=True):
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, eos_token_id=258,
                         tie_word_embeddings=False)
    Qwen2ForCausalLM(config).save_pretrained(path)
    if tokenizer:
        tiny_tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"target": make_model_dir(root / "target", layers=3),
            "draft": make_model_dir(root / "draft", layers=1),
            "draft320": make_model_dir(root / "draft320", vocab=320, layers=1)}


def test_load_local_folders(tiny):
    phases = []
    pair = load_pair(tiny["target"], tiny["draft"], target_device="cpu", draft_device="cpu",
                     progress=lambda msg, frac: phases.append(msg))
    assert pair.vocab_size == 300 and pair.target_layers == 3
    ids = pair.encode_prompt("hi")
    assert ids[0] == 257 and 258 in ids  # the chat template from the target's tokenizer
    assert pair.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert 258 in pair.eos_token_ids
    info = pair.info
    assert info["dtype"] == "float32" and info["precision"] == "fp32"
    for role, layers in (("target", 3), ("draft", 1)):
        assert info[role]["device"] == "cpu" and info[role]["layers"] == layers
        assert info[role]["params"] > 0 and info[role]["load_s"] >= 0
        assert info[role]["source"] == tiny[role]
    assert info["placement"].target_threads == info["placement"].draft_threads == 1
    assert any(p.startswith("Loading the models: the target") for p in phases)
    assert any(p.startswith("Loading the models: the draft") for p in phases)
    assert phases[-1] == "Loading the models: done"


def test_bf16_allowed_fp16_refused_on_cpu(tiny):
    pair = load_pair(tiny["target"], tiny["draft"], precision="bf16",
                     target_device="cpu", draft_device="cpu")
    assert pair.target.dtype == torch.bfloat16 and pair.draft.dtype == torch.bfloat16
    with pytest.raises(MirrorSDError, match="fp16 is not supported.*CPU"):
        load_pair(tiny["target"], tiny["draft"], precision="fp16",
                  target_device="cpu", draft_device="cpu")


def test_unknown_precision(tiny):
    with pytest.raises(MirrorSDError, match="int3.*fp32, int8, int4"):
        load_pair(tiny["target"], tiny["draft"], precision="int3")


def test_the_precision_registry_names_what_runs_where():
    from mirror_sd.models.precision import (PRECISIONS, draft_precisions, precision_note,
                                            target_precisions)
    assert target_precisions() == list(PRECISIONS)
    assert target_precisions("cpu") == ["fp32", "int8", "int4", "fp16w", "int8-dyn", "bf16"]
    assert target_precisions("cuda:0") == ["fp32", "bf16", "fp16"]
    assert draft_precisions() == ["fp32", "int8", "int4", "fp16w", "int8-dyn"]
    assert draft_precisions("cuda:1") == ["fp32"]
    assert "row-exact" in precision_note("int8") and "GPU" in precision_note("fp16")
    with pytest.raises(MirrorSDError, match="fp16 is not supported for a draft on the CPU: use fp32"):
        load_pair(precision="fp32", draft_precision="fp16", target_device="cpu", draft_device="cpu")


def test_load_model_one_model_by_name(tiny):
    """The one-model loader the trainers use: the same names and errors as load_pair; fp32 as
    stored on transformers' own layers unless a precision is asked for."""
    from mirror_sd.cpu import lean_layers
    from mirror_sd.models.loading import load_model
    loaded = load_model(tiny["draft"], "draft")
    assert not loaded.model.training and loaded.model.dtype == torch.float32
    assert lean_layers.installed(loaded.model) == 0
    assert loaded.tokenizer("hi")["input_ids"] and loaded.source.path == tiny["draft"]
    converted = load_model(tiny["draft"], "draft", precision="fp32", tokenizer=False)
    assert converted.tokenizer is None and lean_layers.installed(converted.model) == 1
    only_tokenizer = load_model(tiny["target"], weights=False)
    assert only_tokenizer.model is None and only_tokenizer.tokenizer is not None
    with pytest.raises(MirrorSDError, match="does not exist"):
        load_model("./no/such/model", "draft")


def test_vocab_mismatch_names_both_sizes(tiny):
    with pytest.raises(MirrorSDError, match=r"vocabulary.*300.*320"):
        load_pair(tiny["target"], tiny["draft320"], target_device="cpu", draft_device="cpu")


def test_missing_path_and_non_model_folder(tiny, tmp_path):
    with pytest.raises(MirrorSDError, match="does not exist"):
        load_pair(str(tmp_path / "nope"), tiny["draft"])
    with pytest.raises(MirrorSDError, match="does not exist"):
        load_pair(tiny["target"], str(tmp_path / "missing.gguf"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(MirrorSDError, match="no config.json"):
        load_pair(str(tmp_path / "empty"), tiny["draft"])
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(MirrorSDError, match="not a .gguf"):
        load_pair(tiny["target"], str(tmp_path / "notes.txt"))


def test_custom_code_needs_trust(tmp_path):
    d = tmp_path / "custom"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "mirror-sd-custom",
        "auto_map": {"AutoConfig": "cfg.CustomConfig", "AutoModelForCausalLM": "m.CustomLM"}}))
    with pytest.raises(MirrorSDError, match="trust_remote_code"):
        load_pair(str(d), str(d), target_device="cpu", draft_device="cpu")


def test_unknown_hub_id_fails_fast(tiny):
    t0 = time.perf_counter()
    with pytest.raises(MirrorSDError, match="Hugging Face hub"):
        load_pair("mirror-sd-tests/no-such-model-xyz", tiny["draft"])
    assert time.perf_counter() - t0 < 30


def test_memory_check_before_loading(tiny, monkeypatch):
    import mirror_sd.models.loading as loading

    def no_load(*a, **k):
        raise AssertionError("weights must not be read when memory is short")

    monkeypatch.setattr(loading, "_load_model", no_load)
    with pytest.raises(MirrorSDError, match="GiB of RAM.*available"):
        load_pair(tiny["target"], tiny["draft"], target_device="cpu", draft_device="cpu",
                  memory_limit_bytes=10_000)


def test_resolve_placement_cpu_and_validation():
    p = resolve_placement("cpu", "cpu")
    assert p.target_device_map == "cpu" and p.draft_device == "cpu" and p.both_on_cpu
    with pytest.raises(MirrorSDError, match="Unknown target device 'tpu'"):
        resolve_placement("tpu", "cpu")
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(MirrorSDError, match=f"cuda:{n}.*{n} CUDA GPU"):
        resolve_placement("cpu", f"cuda:{n}")
    if not torch.cuda.is_available() and not torch.backends.mps.is_available():
        auto = resolve_placement()
        assert (auto.target_device_map, auto.draft_device) == ("cpu", "cpu")
        with pytest.raises(MirrorSDError, match="mps"):
            resolve_placement("mps", "cpu")


@pytest.mark.parametrize("n_gpu,target,draft", [(1, "cuda:0", "cuda:0"), (2, "cuda:0", "cuda:1"),
                                                (4, "auto", "cuda:3")])
def test_resolve_placement_auto_with_gpus(monkeypatch, n_gpu, target, draft):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n_gpu)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=None: (8 << 30, 16 << 30))
    p = resolve_placement()
    assert (p.target_device_map, p.draft_device) == (target, draft)
    if target == "auto":  # the target is split over every GPU but the draft's
        assert sorted(p.max_memory) == [0, 1, 2] and p.target_device == "cuda:0"


def test_cpu_threads_and_sync(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(placement_mod, "cpu_cores", lambda: 2)
    try:
        configure_cpu_threads(resolve_placement("cpu", "cpu"))
        configure_cpu_threads(resolve_placement("cpu", "cpu"))  # interop already set: no crash
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_lane_sync_waits_for_the_calling_lanes_stream_only(monkeypatch):
    """On CUDA a lane waits for its own stream, never the whole device (that would also wait
    for the other lane); on a CPU there is nothing queued to wait for."""
    calls = []

    class Stream:
        def synchronize(self):
            calls.append("stream")

    monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: calls.append(str(dev)) or Stream())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: calls.append("device"))
    lane_sync("cuda:1")
    assert calls == ["cuda:1", "stream"]
    lane_sync("cpu")
    lane_sync(torch.device("cpu"))
    assert calls == ["cuda:1", "stream"]


@pytest.mark.real_pair
def test_default_pair():
    from transformers import AutoConfig

    target_dir, draft_dir = ensure_default_pair()
    assert AutoConfig.from_pretrained(target_dir).num_hidden_layers == 28
    assert AutoConfig.from_pretrained(draft_dir).num_hidden_layers == 24
    pair = load_pair(target_device="cpu", draft_device="cpu")
    assert pair.target_layers == 28 and pair.draft.config.num_hidden_layers == 24
    assert pair.vocab_size == 151936
    assert pair.tokenizer.convert_ids_to_tokens(151645) == "<|im_end|>"
    assert 151645 in pair.eos_token_ids
    assert pair.decode(pair.encode_prompt("hi")).startswith("<|im_start|>")


def test_one_lane_methods_get_every_core(tiny, monkeypatch):
    """AR and SD run one model at a time: they get both cores; Mirror-SD keeps one per lane."""
    from mirror_sd.engine.autoregressive import Autoregressive
    from mirror_sd.engine.settings import Settings
    from mirror_sd.engine.mirror.decoder import MirrorSpeculative

    monkeypatch.setattr(placement_mod, "cpu_cores", lambda: 2)
    pair = load_pair(tiny["target"], tiny["draft"], target_device="cpu", draft_device="cpu")
    seen = {}
    for cls in (Autoregressive, MirrorSpeculative):
        events = cls(pair, Settings(max_new_tokens=2)).generate(pair.encode_prompt("hi"))
        next(events)  # the first event: the run is under way
        seen[cls.method] = torch.get_num_threads()
        list(events)
        assert torch.get_num_threads() == 1  # restored when the run ends
    assert seen == {"ar": 2, "mirror": 1}


def _resident_kib(path) -> int:
    """Resident KiB of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        if "-" in line.split(" ", 1)[0]:  # a mapping's header line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.parametrize("name,tied", [("int8", False), ("int8-dyn", False), ("fp16w", False),
                                       ("int8", True)])
def test_converted_target_matches_and_leaves_its_fp32_file(tmp_path, name, tied):
    """load_target converts layer by layer and drops the fp32 file's pages (_convert_lean):
    bit for bit the model apply_precision makes, with little of the file left resident."""
    import sys

    from transformers import AutoModelForCausalLM

    from mirror_sd.models.loading import apply_precision, load_target
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=300, hidden_size=128, intermediate_size=512,  # many pages
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, tie_word_embeddings=tied)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "m")
    model = load_target(str(tmp_path / "m"), precision=name, target_device="cpu")
    if sys.platform.startswith("linux"):  # what stays of the file: embeddings, norms, edges
        file = tmp_path / "m" / "model.safetensors"
        assert _resident_kib(file) * 1024 < 0.25 * file.stat().st_size
    ref = apply_precision(AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32),
                          name, "target")
    ids = torch.tensor([[1, 5, 9, 200, 7, 3]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref(ids).logits)
        assert torch.equal(model(ids[:, :1]).logits, ref(ids[:, :1]).logits)
    assert str(model) == str(ref)


def test_lane_stream_is_a_no_op_off_cuda_and_cache_tensors_finds_the_kv():
    from transformers import DynamicCache
    from mirror_sd.placement import cache_tensors, lane_stream
    import tiny as models

    model = models.target(0).float()
    cache = DynamicCache(config=model.config)
    with lane_stream("cpu", adopt=cache_tensors(cache)), torch.inference_mode():
        model(torch.tensor([models.prompt(0, 5)]), cache=cache, use_cache=True)
    kv = cache_tensors(cache)
    assert len(kv) == 2 * model.config.num_hidden_layers
    assert all(t.shape[-2] == 5 for t in kv)  # [batch, heads, positions, head dim]


def test_torch_threads_sets_and_restores_the_callers_count():
    from mirror_sd.placement import set_process_threads, torch_threads
    before = torch.get_num_threads()
    try:
        set_process_threads(1)
        assert torch.get_num_threads() == 1
        with torch_threads(2):
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
        with pytest.raises(KeyError), torch_threads(2):  # restored when the stretch fails too
            raise KeyError("x")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
