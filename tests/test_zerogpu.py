"""The app's ZeroGPU glue (ui/zerogpu.py) and the Space's configuration, on the CPU: the
decorator transparent off ZeroGPU and handed the handler and its duration callable on it, the
duration from the latency model, what crosses the process boundary surviving pickling, and the
README's Spaces header against the requirements."""
import pickle
import re
import sys
import types
from pathlib import Path

import pytest
import yaml

from mirror_sd.latency.latency_model import default_calibration, predict
from mirror_sd.engine import events as ev
from ui import zerogpu
from ui.handlers import Handlers
from ui.state import AppState

ROOT = Path(__file__).resolve().parent.parent


def _handler(prompt, max_new_tokens=16, methods=None):
    yield prompt, max_new_tokens, methods


def test_off_zerogpu_the_handler_is_returned_unchanged(monkeypatch):
    monkeypatch.delenv(zerogpu.SPACES_ENV, raising=False)
    assert zerogpu.gpu(_handler, duration=60) is _handler
    run = Handlers(AppState.tiny()).run
    assert zerogpu.gpu_run(run) is run
    assert zerogpu.default_precision("int8") == "int8"


def test_the_real_spaces_decorator_is_transparent_off_zerogpu(monkeypatch):
    spaces = pytest.importorskip("spaces")
    monkeypatch.delenv(zerogpu.SPACES_ENV, raising=False)
    assert spaces.GPU(_handler, duration=zerogpu.run_duration(_handler)) is _handler


def test_on_zerogpu_spaces_gpu_gets_the_handler_and_its_duration(monkeypatch):
    calls = []

    def fake_gpu(fn, duration=None):
        calls.append((fn, duration))
        return lambda *a, **k: ("on gpu", fn(*a, **k))

    monkeypatch.setenv(zerogpu.SPACES_ENV, "true")
    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=fake_gpu))
    wrapped = zerogpu.gpu_run(_handler)
    assert wrapped is not _handler and calls[0][0] is _handler
    assert calls[0][1]("p", max_new_tokens=64) == zerogpu.duration_s(64)
    assert zerogpu.default_precision("int8") == zerogpu.GPU_PRECISION
    assert wrapped("p")[0] == "on gpu"


def test_on_zerogpu_without_the_package_the_handler_still_runs(monkeypatch):
    monkeypatch.setenv(zerogpu.SPACES_ENV, "1")
    monkeypatch.setitem(sys.modules, "spaces", None)  # import spaces -> ImportError
    assert zerogpu.spaces_module() is None
    assert zerogpu.gpu(_handler) is _handler


def test_duration_is_the_latency_model_projection_plus_the_allowance(monkeypatch):
    rates = predict(default_calibration())
    expected = sum(100 / rates[m]["tokens_per_s"] for m in ("ar", "mirror")) + zerogpu.LOAD_ALLOWANCE_S
    assert zerogpu.duration_s(100, ("ar", "mirror")) == round(expected)
    assert zerogpu.duration_s(100, ("ar",)) < zerogpu.duration_s(100, ("ar", "mirror"))
    assert zerogpu.duration_s(16) < zerogpu.duration_s(64)
    assert zerogpu.duration_s(0) == round(zerogpu.LOAD_ALLOWANCE_S)
    monkeypatch.setattr(zerogpu, "LOAD_ALLOWANCE_S", 0.0)
    assert zerogpu.duration_s(0) == zerogpu.MIN_DURATION_S
    assert zerogpu.duration_s(100_000) == zerogpu.MAX_DURATION_S


def test_duration_reads_tokens_and_methods_from_the_run_handlers_own_arguments():
    duration = zerogpu.run_duration(Handlers(AppState.tiny()).run)
    args = dict(prompt="a prompt", target="default", gamma=4)  # the controls, by name
    assert duration(**args, max_new_tokens=48, methods=["AR", "Mirror-SD"]) == zerogpu.duration_s(48, ("ar", "mirror"))
    assert duration(**args, max_new_tokens=96, methods=[]) == zerogpu.duration_s(96)
    assert duration(request=None, **args, max_new_tokens=96, methods=["sd"]) == zerogpu.duration_s(96, ("sd",))
    assert duration(**args, max_new_tokens=32, repeat=3) == zerogpu.duration_s(96)
    # a variant is one more run, priced as the method it changes; the default run has three
    assert duration(**args, max_new_tokens=48, methods=["ar", "mirror", "mirror-gated"]) == \
        zerogpu.duration_s(48, ("ar", "mirror", "mirror"))
    from ui.runs import default_methods, variant_of
    assert zerogpu.DEFAULT_METHODS == tuple(variant_of(m)[0] for m in default_methods())


def _one_of_each_event():
    return [
        ev.StepStart(step=1, committed=3, window=[5, 6]),
        ev.EarlyExit(step=1, layer=14, positions=[0, 1], token_ids=[[1, 2], [3, 4]],
                     logprobs=[[-0.1, -2.0], [-0.5, -1.5]], lens=True),
        ev.DraftBranch(step=1, depth=0, root_token=7, score=-0.2, tokens=[8, 9], q_probs=[0.9, 0.8],
                       status="taken", rank=0),
        ev.Verify(step=1, drafted=[5, 6], accepted=1, p_probs=[0.7, 0.1], q_probs=[0.9, 0.8],
                  token=11, kind="correction"),
        ev.Commit(step=1, token_ids=[5, 11], sources=["accepted", "correction"], text="a b", hit=True),
        ev.Span(lane="draft", label="branch", start_ns=10, end_ns=99, step=1, detail="2 rows"),
        ev.Notice(message="draft lane fell back", level="info"),
        ev.Error(message="out of memory"),
        ev.Finish(stats={"tokens_per_s": 3.5, "method": "mirror"}, token_ids=[5, 11], text="a b"),
    ]


def test_every_event_type_survives_a_pickle_round_trip_as_object_and_as_plain_data():
    events = _one_of_each_event()
    assert {type(e) for e in events} == set(ev.EVENT_TYPES.values())  # a new type needs a case here
    assert pickle.loads(pickle.dumps(events)) == events
    plain = zerogpu.plain_events(events)
    assert all(type(v) in (int, float, str, bool, list, dict, type(None))
               for d in plain for v in d.values())
    assert zerogpu.events_from_plain(pickle.loads(pickle.dumps(plain))) == events


def test_the_frames_the_run_handler_yields_survive_pickling():
    handlers = Handlers(AppState.tiny())
    frames = list(handlers.run(prompt="def hello ( x ) :", precision="fp32", max_new_tokens=8,
                               methods=["ar", "mirror"], use_cache=False))
    assert len(frames) >= 2
    for frame in frames:
        back = pickle.loads(pickle.dumps(frame))
        assert [x for x in back if isinstance(x, str)] == [x for x in frame if isinstance(x, str)]
    assert "Done, measured on" in frames[-1][0]  # the status; the verdict beside it names the methods
    assert any("Mirror-SD" in x for x in frames[-1] if isinstance(x, str))


def _header() -> dict:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert m, "README.md must start with the Spaces YAML header"
    return yaml.safe_load(m.group(1))


def _pins() -> dict:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)==([^\s#]+)", line.strip())
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def test_spaces_header_is_valid_for_a_gradio_space_on_zerogpu_and_cpu_basic():
    header, pins = _header(), _pins()
    assert header["sdk"] == "gradio"  # ZeroGPU runs Gradio Spaces only
    assert str(header["sdk_version"]) == pins["gradio"]
    assert (ROOT / header["app_file"]).is_file()
    assert isinstance(header["python_version"], str)  # unquoted 3.10 would read as 3.1
    assert header["python_version"] in ("3.10", "3.12")  # the Pythons ZeroGPU runs
    assert "spaces" in pins and "torch" in pins
    doc = (ROOT / "docs" / "hosting.md").read_text(encoding="utf-8")
    assert "requirements.txt" in doc and pins["torch"] in doc and header["python_version"] in doc


def test_the_apps_device_configuration_menu_follows_the_machine(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert zerogpu.device_configurations() == (["cpu"], "cpu", False)
    assert zerogpu.configuration_devices("cpu") == ("cpu", "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (70 * 2 ** 30, 80 * 2 ** 30))
    choices, value, interactive = zerogpu.device_configurations()
    assert value == "auto" and interactive and "target-gpu-draft-cpu" in choices
    assert zerogpu.configuration_devices("target-gpu-draft-cpu") == ("cuda:0", "cpu")


def test_on_zerogpu_the_main_process_never_asks_torch_for_gpu_memory(monkeypatch):
    import torch

    def no_cuda_here(*a, **k):
        raise AssertionError("CUDA initialised in ZeroGPU's main process")

    monkeypatch.setenv(zerogpu.SPACES_ENV, "true")
    config = types.SimpleNamespace(Config=types.SimpleNamespace(zerogpu_cuda_total_memory=2 ** 36))
    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=None, config=config))
    monkeypatch.setattr(torch.cuda, "mem_get_info", no_cuda_here)
    choices, value, interactive = zerogpu.device_configurations()
    assert interactive and value == "auto" and "gpu-streams" in choices
    assert zerogpu.configuration_devices("draft-gpu-target-cpu") == ("cpu", "cuda:0")
    assert not zerogpu.prepare_in_background()
    monkeypatch.delenv(zerogpu.SPACES_ENV)
    assert zerogpu.prepare_in_background()
