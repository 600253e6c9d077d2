"""The measured constants live in one data file (mirror_sd/data/measured.json), each with what
it is, the command that regenerates it and where it was measured; the code reads them there."""
import re

from mirror_sd import measured
from mirror_sd.paths import REPO_ROOT


def test_every_entry_says_what_it_is_and_how_to_measure_it_again():
    entries = measured.entries()
    assert {"core_split", "default_calibration", "scoring_weights"} <= set(entries)
    for name, entry in entries.items():
        assert entry["what"] and entry["measured_on"] and entry["values"], name
        command = entry["command"]
        assert command.startswith("python "), name
        for script in re.findall(r"python (research/\S+\.py)", command):
            assert (REPO_ROOT / script).is_file(), (name, script)
        for module in re.findall(r"python -m (\S+)", command):
            assert (REPO_ROOT / module.replace(".", "/")).is_dir(), (name, module)


def test_the_code_reads_its_constants_from_the_file():
    from mirror_sd.engine.mirror import scoring
    from mirror_sd.latency import latency_model as lm
    from mirror_sd.latency import whatif_costs

    split = measured.values("core_split")
    assert whatif_costs.core_split("int8", 5) == split["int8"]["5"]
    assert whatif_costs.core_split("fp32", 13) == split["fp32"]["13"]
    assert lm.default_calibration().to_dict() == lm.Calibration.from_dict(
        measured.values("default_calibration")).to_dict()
    assert lm.default_calibration().t_target_1 == measured.values("default_calibration")["t_target_1"]
    weights = measured.values("scoring_weights")
    assert (scoring.EXIT_WEIGHT, scoring.ACCEPT_WEIGHT, scoring.EXIT_WEIGHT_LENS,
            scoring.ACCEPT_WEIGHT_LENS) == (weights["exit_weight"], weights["accept_weight"],
                                            weights["exit_weight_lens"], weights["accept_weight_lens"])


def test_the_core_split_matches_its_measurement_file():
    """research/thread_split.json is the command's own output: the file's split is its split."""
    import json
    recorded = json.loads((REPO_ROOT / "research" / "thread_split.json").read_text())
    commands = recorded["command"] if isinstance(recorded["command"], list) else [recorded["command"]]
    for command in commands:  # each run that wrote rows of the file, named by the entry
        assert command.split("  (")[0] in measured.entries()["core_split"]["command"], command
    for precision, table in measured.values("core_split").items():
        for rows, split in table.items():
            assert recorded["rows"][f"target-{precision}"][rows]["split"] == split
