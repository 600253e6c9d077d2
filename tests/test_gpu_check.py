"""The GPU check's dry run (python -m mirror_sd.gpu_check --dry-run) on the tiny pair: the same
code path as on a GPU, with the configurations that need one reported as skipped."""
import json

import pytest
import torch

from mirror_sd.gpu_check import cli
from mirror_sd.gpu_check.measure import _intersection
from mirror_sd.placement import GPU_CONFIGURATIONS


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    if torch.cuda.is_available():
        pytest.skip("the dry run's skipped configurations assume a machine without a GPU")
    out = tmp_path_factory.mktemp("gpu_check")
    rc = cli.main(["--out", str(out), "--dry-run", "--pair", "tiny"])
    return rc, out, json.loads((out / "gpu_check.json").read_text())


def test_dry_run_writes_both_reports_and_runs_the_cpu_configuration(dry_run):
    rc, out, report = dry_run
    assert rc == 0 and report["mode"] == "dry-run" and report["pair"]["source"] == "tiny"
    runs = {r["configuration"]: r for r in report["runs"]}
    cpu = runs["cpu"]
    assert cpu["status"] == "ran" and (cpu["target_device"], cpu["draft_device"]) == ("cpu", "cpu")
    for m in ("ar", "sd", "mirror"):
        assert cpu["methods"][m]["mismatches"] == "0/1"  # greedy output is generate()'s
        assert cpu["methods"][m]["tok_s"] > 0
    o = cpu["overlap"]
    assert o["clock"].startswith("host") and o["back_to_back_overlap_ms"] == 0.0
    assert 0.0 <= o["at_once_draft_hidden"] <= 1.0
    md = (out / "gpu_check.md").read_text()
    assert "| cpu | fp32 | mirror |" in md and "Pair: tiny" in md


def test_dry_run_reports_each_gpu_configuration_as_skipped_with_the_reason(dry_run):
    _, out, report = dry_run
    runs = {r["configuration"]: r for r in report["runs"]}
    for name in GPU_CONFIGURATIONS:
        assert runs[name]["status"] == "skipped"
        assert "needs a CUDA GPU" in runs[name]["reason"]
        assert f"| {name} | fp32 |  |  | skipped: The device configuration '{name}'" in (
            out / "gpu_check.md").read_text()


def test_time_budget_skips_what_it_cannot_start(tmp_path):
    rc = cli.main(["--out", str(tmp_path), "--dry-run", "--pair", "tiny", "--budget-s", "0"])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert rc == 0 and all(r["status"] == "skipped" and r["reason"].startswith("time budget")
                           for r in report["runs"])


def test_span_intersection():
    assert _intersection((0.0, 10.0), (5.0, 20.0)) == 5.0
    assert _intersection((0.0, 4.0), (5.0, 20.0)) == 0.0
    assert _intersection((2.0, 3.0), (0.0, 20.0)) == 1.0


def test_dry_run_times_a_forward_per_row_count(dry_run):
    """The forward costs section: the tiny shape on the CPU, each row count timed (positive
    medians on the host clock), and the markdown table names it."""
    from mirror_sd.gpu_check.costs import ROWS
    _, out, report = dry_run
    costs = report["forward_costs"]
    assert costs["device"] == "cpu" and costs["clock"] == "host perf_counter_ns"
    (shape,) = costs["shapes"]
    assert shape["status"] == "ran" and shape["layers"] == 2
    assert set(shape["rows"]) == {str(k) for k in ROWS}
    assert all(r["device_ms"] > 0 and r["host_ms"] > 0 for r in shape["rows"].values())
    assert "## Forward costs" in (out / "gpu_check.md").read_text()


def test_forward_costs_skip_shapes_past_their_budget():
    from mirror_sd.gpu_check.costs import forward_costs
    costs = forward_costs("cpu", "fp32", dry_run=True, reps=1, warm=0, budget_s=-1)
    assert [s["status"] for s in costs["shapes"]] == ["skipped"]
    assert "time budget" in costs["shapes"][0]["reason"]


def test_the_what_if_shapes_have_the_model_cards_sizes(tmp_path):
    """The Qwen3 shapes timed on a GPU, built on the meta device: their parameter counts are
    the What-if's (whatif_hardware.TARGETS/DRAFTS, the public model cards') within 1%."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from mirror_sd.gpu_check.costs import shapes
    from mirror_sd.latency.whatif_hardware import DRAFTS, TARGETS
    for name, what, config in shapes(None, dry_run=False):
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
        params = sum(p.numel() for p in model.parameters()) / 1e9
        card = {**TARGETS, **DRAFTS}[what].params_b
        assert abs(params - card) / card < 0.01, (name, params, card)
