"""The model of one speculative step in How it works: its formulas against hand-worked values,
its starting values from the run on screen, and the page's script against the Python figures."""
from __future__ import annotations

import pytest

from ui.stepmodel import SLIDERS, model, outputs, render_calc, run_inputs
from ui_records import tiny_records


def test_the_model_gives_the_expected_tokens_and_each_method_s_step_cost():
    """(1 - a^(k+1)) / (1 - a) tokens per step; SD's step costs v + k·c target forwards, Mirror-SD's
    ideal max(v, e·v + k·c): worked by hand for a cheap and a costly draft."""
    m = model(0.8, 3, 0.1, 1.0, 0.5)
    tokens = 1 + 0.8 + 0.64 + 0.512
    assert m["tokens"] == pytest.approx(tokens)
    assert m["sd"] == pytest.approx(tokens / 1.3)
    assert m["mirror"] == pytest.approx(tokens / 1.0)  # 0.5 + 0.3 fits inside the pass: the draft hidden
    costly = model(0.8, 3, 0.5, 1.0, 0.5)
    assert costly["mirror"] == pytest.approx(tokens / 2.0) and costly["sd"] == pytest.approx(tokens / 2.5)
    assert model(1.0, 4, 0.1, 1.0, 0.5)["tokens"] == 5  # every drafted token kept: the window and one more
    assert model(0.8, 3, 0.0, 1.0, 0.5)["mirror"] == model(0.8, 3, 0.0, 1.0, 0.5)["sd"]  # a free draft: nothing to hide


def test_the_sliders_start_at_the_run_s_own_figures_and_say_from_what():
    """After a run the sliders start at SD's kept share, its median window, the measured costs and the
    exit layer; before one, at the defaults, with no measured line."""
    records = tiny_records()
    meta = {"exit_layer": 2, "target_layers": 4}
    values, said = run_inputs(records, meta)
    assert values["a"] == pytest.approx(round(records["sd"].finish.stats["acceptance_rate"], 2))
    assert values["e"] == 0.5 and said["e"] == "layer 2 of 4"
    from ui.figures import card
    from ui.why import mean_window
    assert values["k"] == max(1, round(mean_window(records["sd"]))) and said["k"] == "SD's mean window"
    for name, _, low, high, _, _ in SLIDERS:
        assert low <= values[name] <= high, name
    html = render_calc(records, meta, 1.23)
    per_step = card(records["sd"]).tokens_per_step
    assert f"SD wrote {per_step:.2f} tokens per verify step" in html and "decoded at <b>1.23×</b> AR" in html
    assert "a model, not a measurement" in html
    for key, text in outputs(values).items():
        assert f'data-out="{key}">{text}<' in html
    empty, _ = run_inputs({}, {})
    assert empty == {name: default for name, *_, default in SLIDERS}
    assert "Measured in the run on screen" not in render_calc({}, {})


def test_the_model_sets_the_page_s_replay_figure_beside_its_own():
    """With the run's replay with the draft on a device of its own (the pay chart's figure), the
    model names it and says why its own figure can differ; the frame hands it that same figure."""
    records = tiny_records()
    html = render_calc(records, {}, 1.1, 1.07)
    assert "Mirror-SD <b>1.07×</b> SD" in html and "every step a hit" in html and "What if, row (b)" in html
    assert "What if, row (b); the pay chart" not in render_calc(records, {}, 1.1)
    from mirror_sd.models.tiny import LAYERS
    from ui.frames import RESULT_OUTPUTS, final_outputs, method_names
    from ui.layout import _how_from_state
    from ui.whatif import best_projection, over_sd_figure
    out = final_outputs(records, {"gamma": 4, "kappa": 8, "branch_budget": 2}, {"target_layers": LAYERS,
                        "exit_layer": LAYERS // 2}, "hello", None, methods=list(records))
    got = dict(zip(RESULT_OUTPUTS, out[1 + len(method_names()):]))
    state = got["state"]
    figure = over_sd_figure(best_projection(state), "b")
    assert figure is not None and state["replay_b"] == figure
    assert f"Mirror-SD <b>{figure:.2f}×</b> SD. This model" in got["how"]
    assert _how_from_state(state) == got["how"]  # the state's re-render keeps the line


def test_the_gain_chart_draws_the_model_s_mirror_over_sd_and_marks_each_pair_on_it():
    """The chart's curve is `model`'s Mirror-SD over SD against the draft's cost (the tokens a step
    cancel); it peaks at 2 - e where k·c = (1 - e)·v and falls towards 1× past it; each mark sits
    at its draft cost with the model's figure there: the draft cost measured here and a paper-like
    one (draft costs, not pairs' projections: the replay is the page's figure for a pair)."""
    import re
    from ui.stepmodel import PAPER_DRAFT, gain, gain_chart
    k, c, v, e = 3, 0.2, 1.2, 0.75
    m = model(0.8, k, c, v, e)
    assert gain(k, c, v, e) == pytest.approx(m["mirror"] / m["sd"])
    peak = (1 - e) * v / k
    assert gain(k, peak, v, e) == pytest.approx(2 - e)
    assert gain(k, peak * 0.5, v, e) < 2 - e and gain(k, peak * 2, v, e) < 2 - e
    assert gain(k, 0.6, v, e) < gain(k, 0.3, v, e)  # past the peak it falls towards 1×
    html = gain_chart({"k": k, "v": v, "e": e}, [("here", 0.33), ("paper", PAPER_DRAFT)])
    marks = re.findall(r'data-c="([\d.]+)" data-gain="([\d.]+)"', html)
    assert [float(x) for x, _ in marks] == [0.33, PAPER_DRAFT]
    for x, g in marks:
        assert float(g) == pytest.approx(gain(k, float(x), v, e), abs=1e-3)
    assert f"peaks at <b>{2 - e:.2f}×</b>" in html and "not a measurement" in html
    records = tiny_records()
    meta = {"exit_layer": 2, "target_layers": 4}
    values, _ = run_inputs(records, meta)
    box = render_calc(records, meta, 1.1, 1.07)
    got = dict(re.findall(r'data-c="([\d.]+)" data-gain="([\d.]+)"', box))
    assert set(got) == {f"{values['c']:.3f}", f"{PAPER_DRAFT:.3f}"}, got
    assert "the draft cost measured here: " in box and "a paper-like draft cost: " in box
