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
