"""The page's figures (ui/figures.py): one set of definitions, recomputable from the events;
the bars start with the same time to first token; the step the inspector and the zoom open on;
median and range over repeated runs."""
from __future__ import annotations

import json
from html import escape as html_escape
import re
from pathlib import Path

import pytest

from mirror_sd.engine.events import Commit, Verify
from mirror_sd.latency.whatif_costs import core_split
from ui.figures import ITEM, LEVEL, ONE_RUN, Spread, cards, level_with, repeat_summary, split_words, spread, verdict, verify_slowdown, winner
from ui.results import render_statistics, render_verdict
from ui.runs import label
from ui.why import PARTS, breakdown
from ui.zoom import bar_label, instructive_step, render_zoom
from ui_records import tiny_records


def test_card_figures_follow_the_stated_definitions():
    records = tiny_records()
    c = cards(records)
    for m, rec in records.items():
        stats, card = rec.finish.stats, c[m]
        first = next(e for e in rec.events if isinstance(e, Commit))
        verifies = [e for e in rec.events if isinstance(e, Verify)]
        assert card.ttft_s == stats["prefill_s"]  # the engine's: start to the first commit
        assert card.decode_tps == pytest.approx((stats["new_tokens"] - len(first.token_ids))
                                                / (stats["wall_s"] - stats["prefill_s"]))
        assert card.e2e_tps == pytest.approx(stats["new_tokens"] / stats["wall_s"])
        assert card.verify_steps == len(verifies)
        assert card.rejections == sum(v.kind == "correction" for v in verifies)
        if verifies:
            assert card.tokens_per_step == pytest.approx(card.tokens / len(verifies))
            lengths = stats["window_lengths"]
            assert card.windows[0] == min(lengths) and card.windows[2] == max(lengths)
    assert c["ar"].decode_speedup == pytest.approx(1.0) and c["ar"].windows is None
    assert c["mirror"].e2e_speedup == pytest.approx(c["mirror"].e2e_tps / c["ar"].e2e_tps)
    assert c["mirror"].hits == records["mirror"].finish.stats["hits"]
    assert c["mirror"].misses == records["mirror"].finish.stats["fallbacks"]


def test_the_bars_start_with_the_cards_time_to_first_token_for_every_method():
    records = tiny_records()
    c = cards(records)
    for m, rec in records.items():
        parts = breakdown(rec)
        assert parts["first_token"] == pytest.approx(c[m].ttft_s, abs=1e-9)
        assert sum(parts[k] for k in PARTS) == pytest.approx(c[m].wall_s)
        if c[m].draft_exposed_s is not None:
            assert c[m].draft_exposed_s == parts["draft_exposed"]


def test_the_verdict_names_the_winner_by_end_to_end_speed():
    records = tiny_records()
    c = cards(records)
    best = winner(c)
    assert best == max(c, key=lambda m: c[m].e2e_tps)
    text = verdict(c, records, {"target_device": "cpu", "draft_device": "cpu"})
    assert "CPU cores, no GPU" in text
    if level_with(c, best):  # tiny runs can finish within 3% of each other
        assert "one run cannot tell" in text and "The trade:" in text and " won" not in text
    else:
        assert f"{label(best) if best != 'ar' else 'Plain decoding (AR)'} won" in text and "The reason:" in text


def test_the_inspector_opens_on_a_rejection_or_a_miss_and_the_zoom_draws_a_mirror_step():
    rec = tiny_records()["mirror"]
    from ui.runs import analyse
    steps = analyse(rec).steps
    step = instructive_step(rec)
    sv = steps[step]
    assert sv.fallback is not None or (sv.verify is not None and sv.verify.kind == "correction")
    earlier = [s for s in steps if s < step]
    assert all(steps[s].fallback is None and (steps[s].verify is None or
                                              steps[s].verify.kind != "correction") for s in earlier)
    html = render_zoom(rec, {"target_layers": 4, "exit_layer": 2})
    assert "verdict at" in html and "next window ready at" in html and "ms" in html
    assert re.search(r"Branch hit:|Late hit \+\d+ ms[:,]|Branch miss:", html)
    assert render_zoom(tiny_records()["sd"], {}) == ""  # plain SD has no such step


def test_repeat_summary_gives_median_and_range_and_says_when_it_includes_one():
    records = tiny_records()
    rounds = [cards(records) for _ in range(3)]
    for r, x in zip(rounds, (0.9, 0.8, 1.2)):
        r["sd"].e2e_speedup = x
        r["ar"].e2e_tps, r["sd"].e2e_tps, r["mirror"].e2e_tps = 10.0, 10.0 * x, 9.0
    spreads = repeat_summary(rounds)
    sd = spreads["sd"]["e2e_speedup"]
    assert isinstance(sd, Spread) and sd.n == 3 and (sd.low, sd.median, sd.high) == (0.8, 0.9, 1.2)
    assert sd.includes_one
    text = verdict(rounds[0], records, {}, spreads)
    assert "(medians of 3 interleaved runs)" in text  # the verdict's speeds are the medians
    # SD's range (8-12 tok/s) holds AR's 10: the verdict says plainly that they cannot be told
    # apart; Mirror-SD's median (9) is SD's, so it ties as well (level_with)
    assert "these 3 runs cannot tell AR from SD or Mirror-SD" in text and " won" not in text, text


def test_every_ratio_over_ar_is_the_shown_speed_over_ar_s_shown_speed():
    """Over interleaved runs the median of per-round ratios differs from the ratio of the
    median speeds; the tiles, the verdict, the cards and the status line all show the latter,
    so a ratio can be checked against the two speeds beside it."""
    from ui.frames import done_message
    from ui.results import render_cards
    records = tiny_records()
    rounds = [cards(records) for _ in range(3)]
    for r, (ar, sd, mirror) in zip(rounds, ((20.0, 18.0, 17.0), (17.0, 18.5, 17.9), (22.0, 19.0, 18.5))):
        for m, tps in (("ar", ar), ("sd", sd), ("mirror", mirror)):
            r[m].e2e_tps, r[m].decode_tps = tps, tps * 1.2
            r[m].e2e_speedup, r[m].decode_speedup = tps / ar, tps / ar
    spreads = repeat_summary(rounds)
    med = {m: spreads[m]["e2e_tps"].median for m in ("ar", "sd", "mirror")}
    assert spreads["sd"]["e2e_speedup"].median != pytest.approx(med["sd"] / med["ar"], abs=0.005)  # they differ here
    html = render_verdict(records, {}, None, spreads)
    cards_html = render_cards(records, {}, spreads)
    status = done_message(records, {}, rounds)
    from ui.results import takeaway
    short = takeaway(records, spreads)
    from ui.results import takeaway_parts
    parts = takeaway_parts(records, spreads)
    assert short and len(parts) >= 2 and short == " ".join(text for _, text in parts) and short not in status
    for lead, text in parts:  # said once, in the verdict, each under its lead (the seconds chart in its item)
        said = f"<li><b>{lead}{'' if lead.endswith('?') else ':'}</b> {__import__('html').escape(text)}"
        assert html.count(said) == 1 and html.split(said)[1].startswith(
            '<div class="msd-split"' if lead == "Against SD, second by second" else "</li>"), lead
    for m in ("sd", "mirror"):
        ratio = f"{med[m] / med['ar']:.2f}×"
        tile = re.search(rf'data-method="{m}".*?msd-tile-big">([^<]*)<.*?msd-tile-small">([^<]*)<', html).groups()
        assert tile == (f"{med[m]:.2f} tok/s", f"{ratio} AR&#x27;s speed")
        head = re.search(r'class="msd-verdict-text">([^<]*)<', html)[1]
        assert f"{label(m)} {ratio} AR" in head  # the verdict's headline: the tiles' ratios
        assert f"{label(m)} {ratio}" not in status  # the verdict says it, once
        decode = spreads[m]["decode_tps"].median / spreads["ar"]["decode_tps"].median
        sub = re.search(r'class="msd-verdict-sub">([^<]*)<', render_statistics(records, {}, {}, 3, spreads))[1]
        assert f"{label(m)} {decode:.2f}× AR" in sub and "the speed after each run&#x27;s first token" in sub
        row = re.search(rf'data-method="{m}".*?over AR, decode / end to end.*?<td><b>([^<]*)</b> / <b>([^<]*)</b>',
                        cards_html).groups()
        assert row == (f"{decode:.2f}×", ratio)


def test_the_verify_slowdown_is_named_as_core_split_times_interference():
    split = core_split("int8", 5)
    text = split_words(2.0 * split, "int8", 5)
    assert f"{split:.2f}× is the core split" in text and "2.00× the two models sharing" in text
    assert split_words(0.9 * split, "int8", 5) == ""  # under the split alone: not split
    assert split_words(3.0, "bf16", 5) == ""  # no one- against two-thread timing at bf16


def test_the_scoreboard_shows_the_cards_end_to_end_figures_and_marks_the_winner():
    records = tiny_records()
    c = cards(records)
    html = render_verdict(records, {"target_device": "cpu", "draft_device": "cpu"})
    best = winner(c)
    assert len(re.findall(r'class="msd-tile( best)?"', html)) == len(c) and f'class="msd-tile best" data-method="{best}"' in html
    assert f"{c['ar'].e2e_tps:.2f} tok/s" in html
    for m in c:
        if m != "ar":
            assert f"{c[m].e2e_speedup:.2f}×" in html
    level = level_with(c, best)
    badges = dict(re.findall(r'data-method="(\w+)".*?class="msd-tile-best[^"]*" title="[^"]*">([^<]*)<', html))
    assert set(badges) == set(c)  # every tile says where it stands, against the same method
    assert badges[best] == ("fastest, a tie" if level else "fastest")
    for m in c:
        if m != best:
            assert badges[m] == (f"within {ONE_RUN:.0%} of {label(best)}" if m in level else "baseline" if m == "ar"
                                 else "slower than the fastest")  # one run: a tie within one run's noise
    assert (f"“within {ONE_RUN:.0%} of {label(best)}”" in html) == bool(level)  # the legend beside the tiles, when a tile ties
    assert "msd-tile-range" not in html  # one run: no range
    from ui.why import lanes_badge
    gate = lanes_badge("mirror", records["mirror"])
    assert not gate or f'<div class="msd-tile-gate">{gate}</div>' in html  # the pane's badge, on the tile
    spreads = {m: {"e2e_tps": Spread(x.e2e_tps, x.e2e_tps * 0.2, x.e2e_tps * 3, 3)} for m, x in c.items()}
    many = render_verdict(records, {"target_device": "cpu", "draft_device": "cpu"}, None, spreads)
    low, high = c["ar"].e2e_tps * 0.2, c["ar"].e2e_tps * 3
    assert f"its 3 runs: {low:.2f}–{high:.2f} tok/s" in many
    assert f"within noise of {label(winner(c, spreads))}" in many  # every range overlaps the winner's
    assert f"“within noise of {label(winner(c, spreads))}”: {label(winner(c, spreads))} was not faster in every round, so these runs " \
           "cannot tell the two apart" in many  # the legend names the top
    for m in c:  # each tile: its own tok/s, then its ratio over AR in words
        big = re.search(rf'data-method="{m}".*?msd-tile-big">([^<]*)<.*?msd-tile-small">([^<]*)<', html).groups()
        assert big[0] == f"{c[m].e2e_tps:.2f} tok/s", big
        assert big[1] == ("plain decoding: the baseline" if m == "ar" else f"{c[m].e2e_speedup:.2f}× AR&#x27;s speed"), big


def test_a_win_within_one_run_s_noise_is_called_level():
    records = tiny_records()
    c = cards(records)
    for m, tps in (("ar", 8.0), ("sd", 10.0), ("mirror", 9.8)):
        c[m].e2e_tps, c[m].e2e_speedup, c[m].complete = tps, tps / 8.0, True
    text = verdict(c, records, {})
    assert "one run cannot tell SD and Mirror-SD apart" in text and "“3, interleaved”" in text and " won" not in text
    # no winner: who ties for the lead first, then one set of ratios, the tiles'
    assert text.startswith("SD and Mirror-SD tie for the lead: SD 1.25× AR, Mirror-SD 1.23× AR end to end; "), text
    from ui.figures import verdict_parts
    assert "tok/s" not in verdict_parts(c, records, {})[0]  # the headline: the tiles give the speeds
    assert "AR 1.00×" not in text
    assert level_with(c, "sd") == ["sd", "mirror"]
    c["mirror"].e2e_tps, c["mirror"].e2e_speedup = 8.5, 8.5 / 8.0  # 15% behind: more than one run's noise
    assert "SD won" in verdict(c, records, {}) and level_with(c, "sd") == []


def test_a_zoom_bar_shows_what_fits_and_names_a_run_of_bars_once():
    assert bar_label("draft: writes branches", 45, 40.0, True) == "draft: writes branches · 45 ms"
    assert bar_label("draft: writes branches", 45, 40.0, False) == "45 ms"  # named on the first
    assert bar_label("early exit: top guesses to the draft", 14, 5.0, True) == "14 ms"  # too narrow
    assert bar_label("verdict", 3, 1.0, True) == ""  # not even its milliseconds fit


def test_the_zoom_s_bars_carry_labels_that_fit_a_phone_s_width_too():
    from ui.zoom import CHAR_PCT_NARROW
    assert bar_label("draft: writes branches", 45, 40.0, True, CHAR_PCT_NARROW) == "45 ms"  # the name would not fit
    html = render_zoom(tiny_records()["mirror"], {"target_layers": 4, "exit_layer": 2})
    bars = re.findall(r'width:([\d.]+)%[^>]*><span class="zl-wide">([^<]*)</span><span class="zl-narrow">([^<]*)</span>', html)
    assert bars and len(bars) == html.count('class="msd-zbar ')
    for width, wide, narrow in bars:
        assert len(narrow) <= len(wide) and len(narrow) * CHAR_PCT_NARROW <= float(width)
    css = (Path(__file__).resolve().parent.parent / "ui" / "panes.css").read_text(encoding="utf-8")
    phone = css[css.index("@media (max-width: 640px) {\n  .msd-zbar .zl-wide"):]
    assert ".msd-zbar .zl-wide { display: none; }" in phone and ".msd-zmark.z-ready { bottom: -32px; }" in phone


def test_the_projection_is_one_short_line_with_its_inputs_named():
    from ui.whatif import choice_row, projection_line
    row = choice_row({"name": "pair", "sd": {"speedup": 2.0}, "mirror": {"speedup": 1.8},
                      "mirror_over_sd": 0.9})
    html = projection_line({"profile": "(c) pair", "row": row, "speedups": row["speedups"],
                            "inputs": "a Qwen3-14B target on a GPU (2680 GB/s)"})
    text = re.sub(r"<[^>]+>", "", html)
    assert "projection, not a measurement" in text and "a Qwen3-14B target on a GPU (2680 GB/s)" in text
    assert "SD 2.00× AR, Mirror-SD 1.80× AR, so Mirror-SD 0.90× SD" in text
    assert text.count("×") == 3  # three figures in the line, no more


def test_the_zoom_names_every_kind_of_bar_it_draws_in_a_legend():
    html = render_zoom(tiny_records()["mirror"], {"target_layers": 4, "exit_layer": 2})
    legend = html.split('class="msd-zlegend"', 1)[1]
    for cls in set(re.findall(r'msd-zbar (z-[a-z]+)', html)):
        assert f'class="{cls}"' in legend, cls


def test_a_first_token_gap_from_one_run_points_to_the_decode_speeds_without_calling_it_noise():
    records = tiny_records()
    c = cards(records)
    c["sd"].ttft_s, c["mirror"].ttft_s = 0.5, 0.5
    assert "same work" not in verdict(c, records, {})
    c["mirror"].ttft_s = 1.0  # twice SD's for the same prompt and first window
    text = verdict(c, records, {})
    assert "Mirror-SD's time to first token (1.00 s) was 2.0× SD's (0.50 s)" in text and "decode speeds" in text
    assert "no range to tell that gap from noise" in text and "is this run's noise" not in text


def test_the_reason_names_its_cause_from_the_runs_own_windows_and_steps():
    """The verdict's reason line: the largest difference between SD's and Mirror-SD's time,
    in words, with the windows, tokens per verify step and verify steps the cards show."""
    from ui.figures import cause_words
    records = tiny_records()
    c = cards(records)
    sd, mirror = c["sd"], c["mirror"]
    sd.windows, sd.verify_steps, sd.tokens = (2, 2, 4), 16, 48
    mirror.windows, mirror.verify_steps, mirror.tokens = (1, 1, 1), 25, 48
    parts = {"sd": {"draft_exposed": 0.76}, "mirror": {"draft_exposed": 0.87}}
    text = cause_words(sd, mirror, parts, {"sd": 0.068, "mirror": 0.062})
    assert text.startswith("Each of Mirror-SD's verify steps wrote fewer tokens: 1.9 against SD's 3.0 "
                           "(its windows 1 drafted token against SD's 2–4, median 2; rejections in "), text
    assert "so 25 verify steps (target forwards) against SD's 16" in text
    assert text.count(".") <= 4 and "Also" not in text  # the minor wait is left to Statistics
    # the same windows: no word of them, the rejections beside the tokens per step
    mirror.windows, mirror.rejections, sd.rejections = (2, 2, 4), 9, 1
    same = cause_words(sd, mirror, parts, {"sd": 0.068, "mirror": 0.062})
    assert "(rejections in 9 of its 25 steps against SD's 1 of 16)" in same and "windows" not in same, same
    # shorter windows on median yet more tokens a step: "more", never "shorter ..., so fewer steps"
    mirror.windows, mirror.verify_steps = (1, 3, 9), 12
    more = cause_words(sd, mirror, parts, {"sd": 0.068, "mirror": 0.07})
    assert "wrote more tokens: 4.0 against SD's 3.0" in more and "shorter" not in more, more
    # Mirror-SD faster: fewer steps, less waiting
    mirror.verify_steps, parts["mirror"]["draft_exposed"] = 12, 0.1
    faster = cause_words(sd, mirror, parts, {"sd": 0.068, "mirror": 0.07})
    assert "so 12 verify steps (target forwards) against SD's 16" in faster and "waited 0.10 s for Mirror-SD's draft against 0.76 s" in faster


def test_the_reason_nets_what_mirror_sd_saved_waiting_against_what_it_lost_verifying():
    records = tiny_records()
    c = cards(records)
    for m, tps in (("ar", 8.0), ("sd", 10.0), ("mirror", 8.5)):  # SD wins clearly
        c[m].e2e_tps, c[m].e2e_speedup, c[m].complete = tps, tps / 8.0, True
    text = verdict(c, records, {"target_device": "cpu", "draft_device": "cpu"})
    assert "SD won" in text and "Net: Mirror-SD" in text
    from ui.figures import verdict_parts
    reason = verdict_parts(c, records, {"target_device": "cpu", "draft_device": "cpu"})[1].split(ITEM)[1]
    assert "Net:" not in reason and ("Mirror-SD" in reason or "alike" in reason)  # the cause first, then the net
    parts = {m: breakdown(records[m]) for m in ("sd", "mirror")}
    saved = parts["sd"]["draft_exposed"] - parts["mirror"]["draft_exposed"]
    lost = parts["mirror"]["verify"] - parts["sd"]["verify"]
    assert (f"saved {saved:.2f} s of waiting" if saved >= 0 else f"waited {-saved:.2f} s longer") in text
    assert (f"lost {lost:.2f} s verifying" if lost >= 0 else f"saved {-lost:.2f} s verifying") in text
    assert "-0." not in text  # never a negative saving
    # the net closes on the two runs' wall times: its parts, first token and the rest included
    said = re.search(r"Net: Mirror-SD (saved|waited) ([\d.]+) s .*? and (lost|saved) ([\d.]+) s verifying; its first "
                     r"token came ([\d.]+) s (later|earlier), and the rest \(overhead, idle\) (added|saved) ([\d.]+) s: "
                     r"its run took ([\d.]+) s against SD's ([\d.]+) s", text)
    assert said, text
    g = said.groups()
    sign = lambda word, v: float(v) * (1 if word in ("waited", "lost", "later", "added") else -1)  # noqa: E731
    total = sign(g[0], g[1]) + sign(g[2], g[3]) + sign(g[5], g[4]) + sign(g[6], g[7])
    assert abs(total - (float(g[8]) - float(g[9]))) <= 0.021, (total, g)
    assert (float(g[8]), float(g[9])) == (round(c["mirror"].wall_s, 2), round(c["sd"].wall_s, 2))


def test_the_verdicts_projection_is_the_what_if_folds_row_c_with_its_inputs_named():
    from mirror_sd.models.tiny import LAYERS
    from ui.results import render_verdict
    from ui.whatif import best_projection, project_state, render_choices
    records = tiny_records()
    state = {"records": records, "settings": {"gamma": 4, "kappa": 8, "branch_budget": 2},
             "meta": {"target_layers": LAYERS, "exit_layer": LAYERS // 2}}
    proj = best_projection(state)
    result, _ = project_state(state)  # the fold at its default inputs
    row = result["choices"]["c"]
    assert proj["speedups"] == {m: row[m]["speedup"] for m in ("sd", "mirror")}
    fold = render_choices(result).split("projection (c)")[1].split("</tr>")[0]
    assert "the verdict&#x27;s figures" in fold or "the verdict's figures" in fold
    html = render_verdict(records, state["meta"], proj)
    for m, x in proj["speedups"].items():
        assert f"{x:.2f}×" in html and f"{x:.2f}×" in fold
    assert "GB/s" in html and "target on a GPU" in html and "draft on an NPU" in html
    # the numbers as text: the verdict prints exactly the cited row's SD, Mirror-SD and ratio
    cells = re.findall(r"<td><b>([^<]+)</b>", fold)
    said = re.search(r'msd-proj-figures">SD (\S+) AR, Mirror-SD (\S+) AR</b>.*?msd-proj-ratio">([^<]+)<', html)
    assert list(said.groups()) == cells[:3], (said.groups(), cells)
    for settings in (x for x in re.findall(r"</b> <small>([^<]*)</small>", fold) if x):
        assert settings in html  # the settings the row names, also in the verdict
    from ui.whatif import render_panel
    line = re.search(r'<p class="msd-projection".*?</p>', html).group(0)
    # the fold opens with the same line, the hit rate's source in full there and in short here
    top = re.search(r'<p class="msd-projection".*?</p>', render_panel(result)).group(0)
    figures = lambda x: re.search(r'msd-proj-figures">(.*?)</b>.*?msd-proj-ratio">([^<]+)<', x).groups()  # noqa: E731
    assert figures(line) == figures(top) and line.split(" (a ")[0] == top.split(" (a ")[0]
    assert proj["hit_source"] in top and proj["hit_source"] not in line
    assert "(its source: the What-if fold)" in line and "(its source: the What-if fold)" not in top
    # at the default inputs the replay table's (c) row replays this run's own steps at its window
    from mirror_sd.latency.whatif_hardware import Accelerators
    from ui.whatif import render_table
    own = render_table(result).split("projection (c)")[1].split("</tr>")[0]
    assert "this run&#x27;s own steps and windows, replayed" in own and "w-other" not in render_table(result)
    # a window set in the inputs: that (c) row (not replayed) says its γ and that it is not the verdict's
    moved, _ = project_state(state, Accelerators(gamma=6))
    other = render_table(moved).split("projection (c)")[1].split("</tr>")[0]
    assert "this run&#x27;s window setting: 4" in other and "not the verdict&#x27;s figures (those are the table above" in other
    assert 'class="w-projection w-other"' in render_table(moved)  # greyed
    # the verdict's table (each profile at its own settings) comes first
    panel = render_panel(result)
    assert panel.index("the settings it picks there") < panel.index("projection profile")


def test_the_projection_says_how_far_it_moved_over_the_interleaved_rounds():
    """Each round's records give their own projection (over_sd_of); the verdict's line, the
    What-if fold's first line and its first table quote one figure, the runs shown's replay, and
    the line gives the rounds' own projections as its range."""
    from mirror_sd.models.tiny import LAYERS
    from ui.results import render_verdict
    from ui.whatif import best_projection, over_sd_of, project_state, render_panel
    records = tiny_records()
    base = {"settings": {"gamma": 4, "kappa": 8, "branch_budget": 2},
            "meta": {"target_layers": LAYERS, "exit_layer": LAYERS // 2}}
    own = over_sd_of(dict(base, records=records))
    assert own["c"] == best_projection(dict(base, records=records))["over_sd"]["c"]
    projected = [{"b": own["b"] * 1.3, "c": own["c"] * 1.3}, {"b": own["b"] * 0.5, "c": own["c"] * 0.5},
                 {"b": own["b"] * 2, "c": own["c"] * 2}, {}]
    state = dict(base, records=records, projected=projected)
    proj = best_projection(state)
    assert proj["over_sd_rounds"]["c"] == [own["c"] * 1.3, own["c"] * 0.5, own["c"] * 2]  # an empty round left out
    # the runs shown's figure, not the rounds' median (1.3× it)
    words = (f'Mirror-SD <b class="msd-proj-ratio">{own["c"]:.2f}×</b> SD (with each of the 3 runs&#x27; own '
             f"projections, the range {own['c'] * 0.5:.2f}–{own['c'] * 2:.2f}×")
    # a range on both sides of 1× says that the runs cannot tell which would be faster there
    either = round(own["c"] * 0.5, 2) < 1 < round(own["c"] * 2, 2)
    words += ": on both sides of 1×, so these runs cannot say whether Mirror-SD would pass SD there)" if either else ")"
    verdict_html = render_verdict(records, base["meta"], proj)
    assert words in verdict_html, verdict_html
    assert "replaying the steps of the runs shown" in verdict_html
    assert f"{own['c'] * 1.3:.2f}×</b>" not in verdict_html  # no second figure (the rounds' median) for it

    result, _ = project_state(state)
    panel = render_panel(result, projected=projected, runs=3)
    assert words in panel
    # the first table: the runs shown's replay, the figure the line quotes, in each profile's row
    assert "These are the figures the page quotes" in panel and "the median of the" not in panel
    row = re.search(r'<tr data-key="c">(.*?)</tr>', panel).group(1)
    assert row.endswith(f"<td><b>{own['c']:.2f}×</b></td>"), row
    assert "as the first table and the verdict's figures do" in panel
    from ui.whatif import rounds_words
    assert rounds_words({"over_sd_rounds": {"b": [0.95, 1.28, 1.1]}}, "b") == (
        "the runs shown replayed (with each of the 3 runs' own projections, the range 0.95–1.28×: on both sides "
        "of 1×, so these runs cannot say whether Mirror-SD would pass SD there)")
    assert rounds_words({"over_sd_rounds": {"b": [1.05, 1.28]}, "over_sd": {"b": 1.3}}, "b") == (
        "the runs shown replayed (with each of the 2 runs' own projections, the range 1.05–1.30×)")
    # a range printed 0.92–1.00× lies below 1× as read, though its top was 1.004
    assert rounds_words({"over_sd_rounds": {"b": [0.92, 1.004]}}, "b") == (
        "the runs shown replayed (with each of the 2 runs' own projections, the range 0.92–1.00×)")
    single = best_projection(dict(base, records=records, projected=[own]))
    one = render_verdict(records, base["meta"], single)
    assert "runs&#x27; own" not in one and "own projections, the range" not in one  # one round: no range
    assert "replaying the steps of this run" in one
    alone = render_panel(result, projected=[own])
    assert "replaying the steps of the runs shown" not in alone and "These are the figures" not in alone


def test_the_figure_quoted_for_b_and_c_is_the_runs_shown_replay_with_the_runs_range():
    """Three runs whose projections of row (b) were 1.76×, 0.85× and 1.13×, the runs shown's
    replay 1.02×: the status, the takeaway and the pay chart quote 1.02×, the What-if tables'
    figure, say so, and give the range of all of them beside it (inconclusive: on both sides of
    1×); without the runs shown's replay, the rounds' median; from one run, that run's figure."""
    from ui.paychart import bars, render_pay_chart
    from ui.results import takeaway
    from ui.whatif import over_sd_figure, round_span
    records = tiny_records()
    proj = {"over_sd": {"b": 1.02, "c": 1.5}, "over_sd_rounds": {"b": [1.76, 0.85, 1.13], "c": [1.5, 1.2, 1.3]}}
    assert over_sd_figure(proj, "b") == 1.02 and over_sd_figure(proj, "c") == 1.5
    assert over_sd_figure({"over_sd_rounds": proj["over_sd_rounds"]}, "b") == 1.13  # no runs-shown replay: the median
    assert round_span(proj, "b") == [1.76, 0.85, 1.13]  # all three runs, none other
    said = takeaway(records, None, proj)
    assert ("Projected, not measured (the chart below, from the steps of the runs shown): Mirror-SD 1.02× SD "
            "with the draft on a device of its own (the runs shown replayed; the 3 runs' own: 0.85–1.76×, "
            "inconclusive); 1.50× SD on an accelerator pair (the runs shown replayed; the 3 runs' own: "
            "1.20–1.50×).") in said, said
    assert "1.13× SD with" not in said and "1.30× SD on" not in said
    apart = dict(proj, over_sd={"b": 1.1, "c": 1.5}, over_sd_rounds={"b": [1.76, 1.05, 1.13], "c": [1.5, 1.2, 1.3]})
    assert ("Mirror-SD 1.10× SD with the draft on a device of its own (the runs shown replayed; the 3 runs' own: "
            "1.05–1.76×)") in takeaway(records, None, apart)
    c = cards(records)
    b, cc = [r for r in bars(c, None, proj) if r["kind"] == "projected"]
    assert (b["value"], b["low"], b["high"]) == (1.02, 0.85, 1.76) and cc["value"] == 1.5
    assert "the runs shown's steps replayed (What if, row (b)); a dot per run's own projection" in b["note"]
    chart = render_pay_chart(proj, c)
    assert b["runs"] == round_span(proj, "b") and len(b["runs"]) == 3
    for v in b["runs"]:  # each run's own projection, a dot on its bar
        assert f'title="one run: {v:.2f}×"' in chart
    assert re.search(r'pc-b">.*?pc-val">1\.02× <small>\(0\.85–1\.76×\)</small> <small class="pc-unsure">inconclusive',
                     chart), chart
    one = {"over_sd": {"b": 1.76, "c": 1.5}, "over_sd_rounds": {"b": [1.76], "c": [1.5]}}
    assert over_sd_figure(one, "b") == 1.76 and round_span(one, "b") == []
    assert "Mirror-SD 1.76× SD with the draft on a device of its own" in takeaway(records, None, one)
    assert "runs' own" not in takeaway(records, None, one)


def test_a_method_within_one_run_s_noise_of_ar_is_said_to_be_indistinguishable_from_it():
    records = tiny_records()
    c = cards(records)
    for m, tps in (("ar", 10.0), ("sd", 12.0), ("mirror", 10.2)):  # SD wins; Mirror-SD 1.02x AR
        c[m].e2e_tps, c[m].e2e_speedup, c[m].complete = tps, tps / 10.0, True
    text = verdict(c, records, {})
    assert "SD won end to end, 1.18× Mirror-SD's speed" in text and "one run cannot tell Mirror-SD and AR apart" in text
    c["mirror"].e2e_tps, c["mirror"].e2e_speedup = 11.5, 1.15
    c["sd"].e2e_tps, c["sd"].e2e_speedup = 14.0, 1.4  # and SD clear of it
    assert "cannot tell" not in verdict(c, records, {})


def test_the_verdicts_verify_figures_name_their_window_and_statistic():
    """The picture's verify forward is a median at one window length, and says so with its
    factor; the reason gives each run's mean verify time per step (Statistics' totals over its
    steps) beside it, so neither reads as the other."""
    from ui.figures import verify_slowdown
    from ui.results import render_verdict
    records = tiny_records()
    c = cards(records)
    for m, tps in (("ar", 8.0), ("sd", 10.0), ("mirror", 9.0)):
        c[m].e2e_tps, c[m].e2e_speedup, c[m].complete = tps, tps / 8.0, True
    text = verdict(c, records, {})
    for m in ("sd", "mirror"):
        steps = c[m].verify_steps - 1
        mean = breakdown(records[m])["verify"] / steps * 1e3
        assert f"{steps} of its {steps + 1} verify steps ({mean:.0f} ms a step, mean)" in text or \
            f"{steps} of its {steps + 1} ({mean:.0f} ms a step, mean)" in text, (m, text)
    slow = verify_slowdown(records)
    if slow:
        assert f"at one window length, {slow['tokens']} tokens, the median verify forward" in text
        html = render_verdict(records, {})
        assert f"one verify forward of {slow['tokens']} tokens" in html
        for key in ("alone_all", "beside_all"):  # each with its steps behind it and their range
            n = len(slow[key])
            assert f"({n} step{'s' if n != 1 else ''}" in html
        apart = min(len(slow["alone_all"]), len(slow["beside_all"])) >= 3 and not slow["overlap"]
        assert (f"beside the draft {slow['factor']:.2f}× as long" in html) == apart
        assert ("tell alone from beside" in html) == (not apart)


def _serial_after(rec, keep: int):
    """A copy of `rec` whose draft spans after its first `keep` verify steps run after the
    target's (the lanes one after the other there), as the overlap gate's serial steps do."""
    from dataclasses import replace as dc_replace
    from mirror_sd.engine.events import Span
    from ui.runs import RunRecord
    ends: dict = {}
    for s in rec.spans:
        if s.lane != "draft":
            ends[s.step] = max(ends.get(s.step, 0), s.end_ns)
    moved = [dc_replace(e, start_ns=ends[e.step] + 1, end_ns=ends[e.step] + 2)
             if isinstance(e, Span) and e.lane == "draft" and e.step >= keep and e.step in ends else e
             for e in rec.events]
    return RunRecord(rec.method, moved, list(rec.times_ns), rec.t0_ns, list(rec.token_texts), dict(rec.id_texts))


def test_statistics_says_how_mirror_sd_s_lanes_shared_the_machine():
    """The lanes-at-once count is read from the spans; its denominator is the card's verify
    steps, on the lanes line and in the costs list of Statistics alike (the engine's own count
    is replaced); the verdict above the fold leaves it to Statistics."""
    from ui.why import lanes_at_once
    records = dict(tiny_records())
    twin = records["mirror"]  # the page's Mirror-SD: its lanes at once in every step
    records["mirror-gated"] = rec = _serial_after(records["mirror"], 2)  # the gate let only 2 steps overlap
    gated_only = {m: r for m, r in records.items() if m != "mirror"}
    steps = cards(records)["mirror-gated"].verify_steps
    at_once, n = lanes_at_once(rec)
    assert n == steps and at_once <= 2 and 2 * at_once < steps
    rec.finish.stats["lane_split"] = ("2 cores: target 1 thread and draft 1 while both work; a lane working "
                                      f"alone 2; lanes overlapped in {at_once} of {steps - 1} steps")
    try:
        html = render_statistics(gated_only, {}, {})
        with_twin = render_statistics(records, {}, {})
        without = render_statistics({m: r for m, r in records.items() if m in ("ar", "sd")}, {}, {})
        stats = html
        verdict_html = render_verdict(gated_only, {})
    finally:
        del rec.finish.stats["lane_split"]
    said = "none" if at_once == 0 else f"only {at_once}"
    assert f"(the lanes at once) in {said} of its {steps} verify steps" in html
    # the twin with its lanes at once in every step: what overlapping measured, beside the gate's choice
    assert "with its lanes at once in every step" not in html
    c = cards(records)
    said = re.search(r"Mirror-SD, with its lanes at once in every step, (hit (\d+) of its (\d+) verdicts .*?and )?"
                     r"ran ([\d.]+) tok/s .*? against Mirror-SD \(gated\)&#x27;s ([\d.]+) tok/s", with_twin)
    assert said, with_twin
    assert float(said.group(4)) == round(c["mirror"].e2e_tps, 2)
    assert float(said.group(5)) == round(c["mirror-gated"].e2e_tps, 2)
    if c["mirror"].hits:
        assert (int(said.group(2)), int(said.group(3))) == (c["mirror"].hits, c["mirror"].hits + c["mirror"].misses)
    assert "Mirror-SD (gated)'s two lanes: 2 cores: target 1 thread" in stats  # the engine's words there
    assert f"both lanes at once in {at_once} of its {steps} verify steps" in stats
    assert f"of {steps - 1} steps" not in stats + html  # one count: never the engine's other one
    assert not re.search(r"at once in (only \d+|none) of", without) and "two lanes" not in without
    assert "two lanes" not in verdict_html and "(the lanes at once)" not in verdict_html  # Statistics says it


def test_the_lanes_line_leads_with_nothing_when_most_steps_overlapped():
    from ui.why import lanes_at_once
    records = tiny_records()
    at_once, steps = lanes_at_once(records["mirror"])
    assert 2 * at_once >= steps  # the tiny pair's lanes overlap in most steps
    stats = records["mirror"].finish.stats
    before = stats.get("lane_split")
    stats["lane_split"] = f"2 GPUs: one lane each; lanes overlapped in 9 of {steps - 1} steps"
    try:
        html = render_statistics(records, {}, {})
    finally:  # the cached records as they were
        stats.pop("lane_split")
        if before is not None:
            stats["lane_split"] = before
    assert f"both lanes at once in {at_once} of its {steps} verify steps." in html
    assert not re.search(r"at once in (only \d+|none) of", html)


def test_the_draft_s_forward_and_the_gate_s_step_cost_are_named_apart():
    """Statistics names the draft's batched branch forward beside the target (ms a forward, over
    a one-token forward alone) and the overlap gate's step cost (ms per drafted token beyond a
    plain decode, in the engine's figures) in words that cannot be read as one figure."""
    import html
    from mirror_sd.engine.mirror.gate import OverlapGate
    from ui.results import render_lanes
    from ui.why import contention, costs
    records = tiny_records()
    stats = records["mirror"].finish.stats
    before = stats.get("lane_split")
    stats["lane_split"] = "2 cores; " + OverlapGate("auto", True, {"overlap": 3.25, "serial": 4.5}).describe()
    try:
        text = html.unescape(re.sub(r"<[^>]+>", "", render_lanes(records)))
    finally:  # the cached records as they were
        stats.pop("lane_split")
        if before is not None:
            stats["lane_split"] = before
    assert ("(the gate's step cost, a step's time beyond a plain decode per drafted token: 3.2 ms with the "
            "lanes overlapped, 4.5 ms one after the other)") in text, text
    assert "measured:" not in text and "its time alone" not in text
    c = costs(records)
    k = contention(c).get("draft")
    if k:
        assert (f"one draft forward over a batch of branches, beside the target: {c['draft_beside'] * 1e3:.0f} ms "
                f"a forward, {k:.2f}× a one-token draft forward alone") in text, text


def test_the_zoom_draws_a_step_the_lanes_overlapped_in():
    """Where the overlap gate ran some steps one lane after the other (no split verify
    forward), the zoom picks one whose forward was split at the early exit."""
    from mirror_sd.engine.events import Span
    from ui.runs import RunRecord
    from ui.zoom import zoom_step
    rec = tiny_records()["mirror"]
    first = zoom_step(rec)
    serial = RunRecord("mirror", t0_ns=rec.t0_ns, token_texts=rec.token_texts, id_texts=rec.id_texts)
    for ev, t in zip(rec.events, rec.times_ns):
        if not (isinstance(ev, Span) and ev.step == first and ev.label in ("prefix", "exit_head", "suffix")):
            serial.add(ev, t)
    other = zoom_step(serial)
    labels: dict = {}
    for sp in serial.spans:
        labels.setdefault(sp.step, set()).add(sp.label)
    # the steps still split at the exit with branches beside (the gate times each step, so a
    # tiny run may have none left: then a hit or a step with branches, never an empty one)
    from ui.runs import analyse
    steps = analyse(serial).steps
    overlapped = {s for s, have in labels.items() if {"prefix", "branches"} <= have and s in steps and s > 0
                  and (steps[s].verify is None or steps[s].verify.drafted)}  # with a window to verify (never the first)
    if overlapped:
        assert other != first and other in overlapped, (first, other, sorted(overlapped))
    else:
        assert other is not None and labels[other] - {"accept"}, (first, other, labels)


def test_the_zoom_never_draws_an_empty_or_plain_decode_step_when_a_better_one_exists():
    """The zoom's step has a window to verify and something to draw besides its verdict; a step
    whose lanes overlapped (split at the exit, branches beside it) wins when there is one."""
    from mirror_sd.engine.events import Span
    from ui.runs import RunRecord
    from ui.runs import analyse
    from ui.zoom import SEGMENTS, zoom_step
    rec = tiny_records()["mirror"]
    steps = analyse(rec).steps
    labels = lambda r, s: {sp.label for sp in r.spans if sp.step == s}  # noqa: E731
    s = zoom_step(rec)
    assert s and (labels(rec, s) & set(SEGMENTS)) - {"accept"}
    assert steps[s].verify is None or steps[s].verify.drafted
    overlapped = [t for t in steps if t > 0 and {"prefix", "branches"} <= labels(rec, t)]
    assert not overlapped or s in overlapped
    # the same run with that step's spans gone but its verdict: another step is drawn
    bare = RunRecord("mirror", t0_ns=rec.t0_ns, token_texts=rec.token_texts, id_texts=rec.id_texts)
    for ev, t in zip(rec.events, rec.times_ns):
        if not (isinstance(ev, Span) and ev.step == s and ev.label != "accept"):
            bare.add(ev, t)
    assert zoom_step(bare) != s


def test_the_hardware_box_leads_into_the_chart_without_restating_its_figures():
    """The box about one shared device says what Mirror-SD lacks here and hands the figures to
    the chart (rows (b) and (c) of What if), never a projection of its own."""
    from ui.results import hardware_line
    records = tiny_records()
    meta = {"target_device": "cpu", "draft_device": "cpu"}
    line = hardware_line(records, meta, {"over_sd": {"b": 0.95, "c": 1.41}})
    assert "The chart shows what the same steps would give" in line
    assert "0.95" not in line and "1.41" not in line
    assert "the paper pairs" in hardware_line(records, meta, {})  # no projection: what it needs, in words
    # the lead says plainly whether this machine showed Mirror-SD's gain (its speed against SD's)
    lost = records["mirror"].finish.stats["tokens_per_s"] <= records["sd"].finish.stats["tokens_per_s"]
    assert line.startswith("This machine cannot show what Mirror-SD gains") == lost
    assert line.startswith("Here both models share") == (not lost)


def test_statistics_leads_its_reason_as_the_verdict_text_does():
    """Over interleaved runs whose ranges overlap the reason's lead is "The trade:", said once in
    the Statistics fold with its arithmetic (the verdict on the page leaves it there), and
    names the run it is."""
    records = tiny_records()
    rounds = [cards(records) for _ in range(3)]
    for r, x in zip(rounds, (1.05, 0.98, 1.2)):  # SD first by its median, its range overlapping AR's
        r["ar"].e2e_tps, r["sd"].e2e_tps, r["mirror"].e2e_tps = 10.0, 10.0 * x, 9.9 * x
    spreads = repeat_summary(rounds)
    verdict_html = render_verdict(records, {}, None, spreads)
    stats = render_statistics(records, {}, {}, 3, spreads)
    assert "<b>The trade:</b>" in stats and "The trade:" not in verdict_html  # said once, with its arithmetic
    assert "the runs shown: each method's middle run of 3" in stats


def test_mirror_sd_s_card_says_its_hits_and_misses_even_when_none():
    """Every step with its lanes in turn: 0 hits, 0 misses, still on Mirror-SD's card (its
    strip shows as many); SD's card has no such row."""
    from ui.figures import card
    records = tiny_records()
    stats = records["mirror"].finish.stats
    saved = {k: stats[k] for k in ("hits", "fallbacks", "hit_rate")}
    stats.update(hits=0, fallbacks=0, hit_rate=None)
    try:
        c = card(records["mirror"])
    finally:
        stats.update(saved)
    assert (c.hits, c.misses) == (0, 0)
    assert card(records["sd"]).hits is None


def test_the_what_if_note_on_the_two_row_c_figures_shows_only_when_they_differ():
    from mirror_sd.models.tiny import LAYERS
    from ui.whatif import choice_row, project_state, render_choices
    records = tiny_records()
    state = {"records": records, "settings": {"gamma": 4, "kappa": 8, "branch_budget": 2},
             "meta": {"target_layers": LAYERS, "exit_layer": LAYERS // 2}}
    result, _ = project_state(state)
    if result["profiles"]["c"].acceptance_from_run:
        return  # row (c) replays this run: one figure, no note to give
    row = choice_row(result["choices"]["c"])
    for m in ("sd", "mirror"):  # the first table's row (c) as the second table shows it
        result["projected"]["c"][m]["speedup"] = float(row[m].rstrip("×"))
    assert "so the two (c) figures differ" not in render_choices(result)
    result["projected"]["c"]["sd"]["speedup"] += 0.25
    assert "so the two (c) figures differ" in render_choices(result)


def test_the_verify_picture_says_what_mirror_sd_s_steps_were():
    """Mirror-SD's verify bar is "beside the draft" only for steps whose lanes overlapped; with
    most of its steps run one lane after the other the picture is left out."""
    from ui.figures import verify_slowdown
    records = dict(tiny_records())
    html = render_verdict(records, {})
    slow = verify_slowdown(records)
    if slow is None:
        return
    n = len(slow["beside_all"])
    if slow["at_once"] == n:
        assert "beside the draft: " in html and "lanes in turn" not in html.split("msd-vpic")[1]
    records["mirror"] = _serial_after(records["mirror"], 0)  # every step's lanes in turn
    slow = verify_slowdown(records)
    if slow is None:
        return
    assert slow["at_once"] == 0
    html = render_verdict(records, {})
    # steps that ran as SD's say nothing of alone against beside: no verify picture
    assert "one verify forward" not in html and "beside the draft: " not in html


def test_the_cards_say_why_the_same_prompt_gives_other_speeds_run_to_run():
    from ui.results import render_cards
    records = tiny_records()
    priced = render_cards(records, {}, None, {"window": "priced"})
    assert "choose each window from costs measured while they run (drafting only where it pays)" in priced
    assert "“3, interleaved” runs show that spread" in priced
    rounds = [cards(records) for _ in range(3)]
    many = render_cards(records, {}, repeat_summary(rounds), {"window": "priced"})
    assert "the range across the interleaved runs shows that spread" in many
    assert "choose each window" not in render_cards(records, {}, None, {"window": "fixed"})


def test_the_zoom_draws_the_twin_s_step_when_mirror_sd_ran_no_step_with_its_lanes_at_once():
    """The gate may run every Mirror-SD step in turn (no early-exit split, no branches beside
    the target): the zoom then draws a step of the run with its lanes at once, and names it."""
    from mirror_sd.engine.events import Span
    from ui.runs import RunRecord
    from ui.zoom import render_zoom, zoom_record
    records = dict(tiny_records())
    own = records["mirror"]
    kept = [i for i, e in enumerate(own.events)
            if not (isinstance(e, Span) and e.label in ("prefix", "branches"))]
    in_turn = RunRecord("mirror", [own.events[i] for i in kept], [own.times_ns[i] for i in kept], own.t0_ns,
                        list(own.token_texts), dict(own.id_texts))
    twin = RunRecord("mirror-gated", list(own.events), list(own.times_ns), own.t0_ns,
                     list(own.token_texts), dict(own.id_texts))
    assert zoom_record(dict(records)) is own  # Mirror-SD's own run when it has such a step
    assert zoom_record(dict(records, mirror=in_turn)) is in_turn  # no twin: its own, whatever it holds
    picked = zoom_record(dict(records, mirror=in_turn, **{"mirror-gated": twin}))
    assert picked is twin
    assert "One Mirror-SD (gated) step, measured" in render_zoom(picked, {})
    # one step at once, the rest in turn: the twin's usual step, not the gated run's rare one
    from ui.why import lanes_at_once
    mostly = _serial_after(own, 2)
    assert 0 < 2 * lanes_at_once(mostly)[0] < lanes_at_once(mostly)[1]
    assert zoom_record(dict(records, mirror=mostly, **{"mirror-gated": twin})) is twin
    assert zoom_record(dict(records, mirror=mostly)) is mostly
    assert zoom_record({"ar": records["ar"], "sd": records["sd"]}) is None


def test_the_settings_line_says_what_the_window_setting_bounds_beside_the_windows_drafted():
    """Priced windows (the default) are priced each step, from none up to the longest allowed:
    the settings line says so, never a bare "window setting 4" beside windows of 0-3 or 8, and
    gives the windows each run drafted as the cards do."""
    records = tiny_records()
    c = cards(records)
    settings = {"gamma": 4, "kappa": 8, "branch_budget": 2, "temperature": 0.0, "max_new_tokens": 24,
                "window": "priced", "window_max": 12}
    text = re.sub(r"<[^>]+>", "", render_statistics(records, settings, {}))
    assert "windows priced each step from the measured costs: 0 to 12 tokens (window setting 4 tokens: " \
           "not their length here)" in text
    drafted = ", ".join(f"{label(m)} {x.windows[0]} / {x.windows[1]:g} / {x.windows[2]}"
                        for m, x in c.items() if x.windows)
    assert f"windows drafted (min / median / max): {drafted}" in text
    fixed = re.sub(r"<[^>]+>", "", render_statistics(records, dict(settings, window="fixed"), {}))
    assert "window setting 4 tokens (every window)" in fixed


def test_a_method_whose_range_overlaps_ar_s_is_named_in_the_same_sentence_without_nesting():
    records = dict(tiny_records())  # a copy: the cached records are shared by other tests
    records["mirror-gated"] = records["mirror"]
    rounds = [cards(records) for _ in range(3)]
    speeds = {"ar": (10.0, 10.2, 9.8), "sd": (12.0, 12.5, 11.8), "mirror": (11.9, 12.4, 11.7),
              "mirror-gated": (10.1, 9.5, 10.6)}
    for i, r in enumerate(rounds):
        for m, x in speeds.items():
            r[m].e2e_tps, r[m].e2e_speedup, r[m].complete = x[i], x[i] / speeds["ar"][i], True
    text = verdict(rounds[0], records, {}, repeat_summary(rounds))
    head = text.split(".")[0] + "."
    # SD was faster than Mirror-SD in every round, but by less than one run's noise
    assert ("these 3 runs cannot tell SD and Mirror-SD apart, nor Mirror-SD (gated) and AR, "
            "within this machine's noise: SD was faster than Mirror-SD in all of the 3 rounds, but by less "
            "than 3% (medians); Mirror-SD (gated) was faster than AR in 2 of the 3 rounds.") in text, head
    assert "((" not in text and "))" not in text
    # SD ahead of everything: the method level with AR follows after a semicolon
    for i, r in enumerate(rounds):
        r["mirror"].e2e_tps = 9.0 + i * 0.1
    text = verdict(rounds[0], records, {}, repeat_summary(rounds))
    assert ("; these 3 runs cannot tell Mirror-SD (gated) and AR apart, within this machine's "
            "noise: Mirror-SD (gated) was faster than AR in 2 of the 3 rounds.") in text, text
    # faster than AR in every round by more than 3%, though the ranges overlap: the rounds, compared
    # pairwise, tell them apart (a round the whole machine ran slow counts against both alike)
    for i, r in enumerate(rounds):
        r["mirror-gated"].e2e_tps = (10.5, 12.5, 11.0)[i]
        r["ar"].e2e_tps = (10.0, 12.0, 10.5)[i]
    text = verdict(rounds[0], records, {}, repeat_summary(rounds))
    assert "(gated) and AR" not in text, text


def test_a_device_of_its_own_projecting_more_than_the_accelerator_pair_says_why():
    from ui.results import hardware_line
    records = tiny_records()
    line = hardware_line(records, {}, {"over_sd": {"b": 1.4, "c": 1.02}})
    assert "this pair's costly draft leaves much to hide" in line and "1.40" not in line
    from ui.figures import verify_slowdown
    slow = verify_slowdown(records)  # the cost of overlapping on shared cores, where it shows
    if slow and slow["factor"] > 1.05:
        assert (f"the target's verify pass took {slow['factor']:.2f}× its time alone (medians, at one window "
                f"length: {slow['tokens']} tokens)") in line, line
    else:
        assert "verify pass took" not in line, line
    assert "dear" not in hardware_line(records, {}, {"over_sd": {"b": 1.04, "c": 1.02}})


def test_the_zoom_states_the_rule_a_hit_rests_on_with_the_step_s_figures():
    """A hit's zoom names the condition: when the taken branch was ready after the early exit
    against the target's time from the exit to its verdict, and whether the target waited at
    the verdict."""
    from mirror_sd.engine.events import Span
    from ui.zoom import fit, rule_words
    ms = 1_000_000

    def rule(done: int, verdict: int) -> str:  # the branch forwards end at `done`
        spans = [Span("target", "prefix", 0, 100 * ms, 3, ""), Span("target", "exit_head", 100 * ms, 110 * ms, 3, ""),
                 Span("target", "suffix", 110 * ms, 170 * ms, 3, ""), Span("draft", "branches", 110 * ms, done * ms, 3, "")]
        f = fit(spans, max(done, verdict) * ms, verdict * ms)  # as render_zoom's ready
        return rule_words(dict(f, after="layers 25–28 and its verdict"))

    late = rule(400, 170)
    assert "was ready <b>290 ms</b> after the exit" in late and "layers 25–28 and its verdict took <b>60 ms</b>" in late
    assert "waited 230 ms" in late
    early = rule(150, 170)
    assert "was ready by <b>40 ms</b> after the exit" in early and "the drafting was hidden" in early
    # the verdict 20 ms after the suffix (its acceptance): the draft's 75 ms fit in the target's 80,
    # so both figures run to the verdict and agree with "hidden", never 75 against the suffix's 60
    close = rule(185, 190)
    assert "<b>75 ms</b>" in close and "took <b>80 ms</b>" in close and "the drafting was hidden" in close
    assert rule_words(None) == ""


def test_the_zoom_prefers_a_hit_that_saved_time_and_sets_the_nearest_miss_beside_it():
    """A hit whose branch was done sooner after the verdict than a fresh window takes is the
    step the zoom draws, and its caption says what it saved and what a miss nearby cost."""
    import dataclasses
    from mirror_sd.engine.events import Span
    from ui.runs import RunRecord, analyse, verdict_outcome
    from ui.steps import after_verdict_s
    from ui.zoom import redraft_ms, nearest_miss
    rec = tiny_records()["mirror"]
    steps = analyse(rec).steps
    hits = [s for s in steps if verdict_outcome(steps[s]) == "hit"]
    assert hits and any(verdict_outcome(steps[s]) == "miss" for s in steps)
    hit = hits[0]
    verdict = max(sp.end_ns for sp in rec.spans if sp.step == hit and sp.label in ("suffix", "accept"))
    fresh_ms = redraft_ms(rec)
    # the same run with the hit's branch done 1 ms after its verdict: a wait shorter than a fresh window
    quick = RunRecord("mirror", t0_ns=rec.t0_ns, token_texts=rec.token_texts, id_texts=rec.id_texts)
    for ev, t in zip(rec.events, rec.times_ns):
        if isinstance(ev, Span) and ev.step == hit and ev.label == "branches" and ev.end_ns > verdict:
            ev = dataclasses.replace(ev, end_ns=verdict + 1_000_000)
        quick.add(ev, t)
    assert abs(after_verdict_s(quick, hit) * 1e3 - 1.0) < 1e-6 and fresh_ms > 1.0
    text = re.sub(r"<[^>]+>", "", render_zoom(quick, {"target_layers": 4}, step=hit))
    assert f"this hit saved {round(fresh_ms) - 1} ms" in text, text  # the two figures shown, subtracted
    n, miss_ms = nearest_miss(quick, hit)
    assert verdict_outcome(steps[sorted(steps)[n - 1]]) == "miss"
    assert f"Compare step {n}, a miss: no branch started at its verdict, so the target waited {miss_ms:.0f} ms" in text
    assert "it cost time here" not in text


def _split_records():
    """The recorded runs with two Mirror-SDs against SD: the gated one's lanes in turn after its
    first step, the twin's at once in every step."""
    records = dict(tiny_records())
    records["mirror-gated"] = records["mirror"]
    records["mirror"] = _serial_after(records["mirror"], 0)
    return records


ROW = (r'data-part="(\w+)" data-cents="(-?\d+)"><span class="sp-track">(.*?)<span class="sp-zero"></span></span>'
       r'<span class="sp-label"[^>]*>([^<]*)</span>')
BAR = r'class="sp-bar sp-(\w+)" style="(left|right):50%;width:([\d.]+)%;background:(#\w+)" title="([^"]*)"'


def _chart_rows(page: str) -> dict[str, list[dict]]:
    """The seconds chart read back from its HTML: per method, its rows in order, each with its
    part, hundredths, bar (side, width, colour, title) and label as printed."""
    from html import unescape
    out = {}
    for block in page.split('<div class="sp-method" data-method="')[1:]:
        rows = []
        for part, n, track, text in re.findall(ROW, block):
            bar = re.search(BAR, track)
            rows.append({"part": part, "cents": int(n), "label": unescape(text),
                         "bar": bar and {"kind": bar[1], "edge": bar[2], "width": float(bar[3]),
                                         "colour": bar[4], "title": unescape(bar[5])}})
        out[block.split('"')[0]] = rows
    return out


def _printed_cents(label_text: str) -> int:
    """'+0.49 s ...', 'Mirror-SD: −0.71 s against ...' -> 49, -71."""
    sign, whole = re.search(r"([+−]?)(\d+\.\d\d) s", label_text).groups()
    return round(float(whole) * 100) * (-1 if sign == "−" else 1)


def test_mirror_sd_s_time_against_sd_s_is_split_into_parts_that_add_up_to_the_difference():
    """Each Mirror-SD's wall time against SD's, split into the drafting the target waited for
    (the overlap), the count of verify steps (at SD's mean a step), each step's time and the
    rest: the parts add up to the difference, read from each method's own record (the twin's
    too); the chart prints each part as its two decimals round it (the rest closing the sum),
    the total as the cards' wall times subtract, and its printed parts add up to its printed
    total; the takeaway says the total in one line."""
    from ui.figures import time_split
    from ui.results import takeaway_parts
    from ui.splitchart import LEAD, cents, printed_split, render_split_chart, short_line
    records = _split_records()
    c = cards(records)
    chart = _chart_rows(render_split_chart(c, records, ["mirror", "mirror-gated"]))
    assert list(chart) == ["mirror", "mirror-gated"]
    for m in ("mirror", "mirror-gated"):
        split = time_split(c["sd"], c[m], records["sd"], records[m])
        assert split is not None
        assert split["total"] == pytest.approx(c[m].wall_s - c["sd"].wall_s)
        assert sum(split[k] for k in ("overlap", "steps", "per_step", "rest")) == pytest.approx(split["total"])
        waited = {x: breakdown(records[x])["draft_exposed"] for x in ("sd", m)}
        assert split["overlap"] == pytest.approx(waited[m] - waited["sd"])
        printed = printed_split(c, records, m)
        assert printed["total"] == cents(c[m].wall_s) - cents(c["sd"].wall_s)
        assert abs(printed["total"] / 100 - split["total"]) <= 0.01 + 1e-9
        for k in ("overlap", "steps", "per_step"):  # as the words rounded them; 0.00 s left out
            assert printed["parts"].get(k, 0) == round(float(f"{split[k]:.2f}") * 100), k
        assert abs(printed["parts"].get("rest", 0) / 100 - split["rest"]) <= 0.025 + 1e-9
        assert 0 not in printed["parts"].values() and sum(printed["parts"].values()) == printed["total"]
        rows = chart[m]
        total, parts = rows[0], rows[1:]
        assert total["part"] == "total" and _printed_cents(total["label"]) == printed["total"]
        assert total["label"].startswith(f"{label(m)}: ") and f"against SD's {c['sd'].wall_s:.2f} s" in total["label"]
        assert {r["part"]: _printed_cents(r["label"]) for r in parts} == printed["parts"]
        assert sum(_printed_cents(r["label"]) for r in parts) == _printed_cents(total["label"])
    assert time_split(c["sd"], c["mirror"], records["sd"], records["mirror"]) != time_split(
        c["sd"], c["mirror-gated"], records["sd"], records["mirror-gated"])
    said = dict(takeaway_parts(records))[LEAD]
    assert said == short_line(c, records, ["mirror", "mirror-gated"])
    n = {m: printed_split(c, records, m)["total"] for m in ("mirror", "mirror-gated")}
    assert said == (f"Mirror-SD took {abs(n['mirror']) / 100:.2f} s {'more' if n['mirror'] > 0 else 'less'} than SD "
                    f"({c['mirror'].wall_s:.2f} s against {c['sd'].wall_s:.2f} s); Mirror-SD (gated) "
                    f"{abs(n['mirror-gated']) / 100:.2f} s {'more' if n['mirror-gated'] > 0 else 'less'} "
                    f"({c['mirror-gated'].wall_s:.2f} s); the chart below splits each."), said
    assert len(said.split()) < 60  # one line per method, the detail in the chart
    alone = {m: x for m, x in c.items() if m != "sd"}
    assert printed_split(alone, records, "mirror") is None and short_line(alone, records, ["mirror"]) == ""
    assert render_split_chart(alone, records, ["mirror"]) == ""


def test_the_seconds_chart_draws_each_part_on_its_side_of_the_zero_line_on_one_scale():
    """Saved seconds left of the zero line, lost ones right, in their own colours; every bar
    of every method on one scale (the largest figure drawn fills half the track); each bar's
    title the sentence with its figures, the steps' counts and the drafting hidden among them;
    the chart sits in its takeaway item, under its line."""
    from ui.palette import SPLIT
    from ui.results import render_verdict
    from ui.splitchart import printed_split, render_split_chart
    records = _split_records()
    c = cards(records)
    c["sd"].wall_s += 1.0  # SD a second slower: Mirror-SD's total and its rest saved, other parts lost
    html = render_split_chart(c, records, ["mirror", "mirror-gated"])
    chart = _chart_rows(html)
    drawn = [r for rows in chart.values() for r in rows]
    top = max(abs(r["cents"]) for r in drawn)
    assert f'data-top-cents="{top}"' in html
    assert {r["bar"]["kind"] for r in drawn} == {"saved", "lost"}
    for r in drawn:
        n, bar = r["cents"], r["bar"]
        assert n != 0 and bar is not None, r
        assert (bar["kind"], bar["edge"], bar["colour"]) == (
            ("lost", "left", SPLIT["lost"]) if n > 0 else ("saved", "right", SPLIT["saved"])), r
        assert bar["width"] == pytest.approx(50 * abs(n) / top, abs=0.051), r
        assert _printed_cents(r["label"]) == n, r
        assert re.search(r"([+−])\d", r["label"])[1] == ("+" if n > 0 else "−"), r
        assert f"{abs(n) / 100:.2f} s" in bar["title"] and bar["title"].endswith("."), r
    assert max(r["bar"]["width"] for r in drawn) == pytest.approx(50.0)
    for m, rows in chart.items():
        got, x = printed_split(c, records, m), c[m]
        assert rows[0]["part"] == "total" and rows[0]["cents"] == got["total"] < 0
        assert rows[0]["bar"]["title"] == (f"{label(m)} took {x.wall_s:.2f} s, {abs(got['total']) / 100:.2f} s "
                                           f"less than SD's {c['sd'].wall_s:.2f} s.")
        for r in rows[1:]:
            verb = "lost" if r["cents"] > 0 else "saved"
            assert r["bar"]["title"].startswith(f"{label(m)} {verb} {abs(r['cents']) / 100:.2f} s on "), r
            if r["part"] == "steps":
                assert f"({x.verify_steps} against {c['sd'].verify_steps}" in r["bar"]["title"], r
            if r["part"] == "overlap" and (x.draft_hidden_s or 0) >= 0.005:
                assert f"hid {x.draft_hidden_s:.2f} s of it beside the target" in r["bar"]["title"], r
    page = render_verdict(records, {})
    item = page.split("<b>Against SD, second by second:</b>")[1].split("</li>")[0]
    assert '<div class="msd-split"' in item and page.count('class="msd-split"') == 1


def test_a_mirror_sd_as_long_as_sd_gets_a_total_row_without_a_bar_and_one_clause():
    """A Mirror-SD whose wall time prints as SD's: the line says it took as long as SD, its
    total row reads 0.00 s with no bar, and its parts (the rest closing the sum) still add up
    to it."""
    from ui.splitchart import printed_split, render_split_chart, short_line
    records = _split_records()
    c = cards(records)
    c["mirror"].wall_s = c["sd"].wall_s
    assert short_line(c, records, ["mirror"]) == (f"Mirror-SD took as long as SD ({c['sd'].wall_s:.2f} s against "
                                                 f"{c['sd'].wall_s:.2f} s); the chart below splits it.")
    rows = _chart_rows(render_split_chart(c, records, ["mirror"]))["mirror"]
    assert rows[0] == {"part": "total", "cents": 0, "label": f"Mirror-SD: 0.00 s against SD's {c['sd'].wall_s:.2f} s",
                       "bar": None}
    assert sum(r["cents"] for r in rows[1:]) == 0 and printed_split(c, records, "mirror")["total"] == 0
    assert all(r["bar"] is not None for r in rows[1:])


def test_the_cards_give_the_run_shown_with_the_rounds_ranges_where_the_page_shows_middle_runs():
    """Where the page shows each method's middle run (meta "median_runs"), a card's times and
    speeds are that run's own, the rounds' range beside them, and its ratios over AR are that
    run's over AR's: one figure per run in the card, its pane and the What-if fold."""
    from ui.results import render_cards
    records = tiny_records()
    rounds = [cards(records) for _ in range(3)]
    for r, k in zip(rounds, (0.8, 1.2, 1.3)):  # the run shown (x1) is not the median (x1.2)
        for m in r:
            r[m].ttft_s, r[m].decode_tps, r[m].e2e_tps = r[m].ttft_s * k, r[m].decode_tps * k, r[m].e2e_tps * k
    spreads = repeat_summary(rounds)
    c = cards(records)
    html = render_cards(records, {"median_runs": {"ar": 1, "sd": 1, "mirror": 1}}, spreads)
    assert "Every row: each method&#x27;s middle run of 3" in html or "Every row: each method's middle run of 3" in html
    for m, x in c.items():
        card = html.split(f'data-method="{m}"')[1].split("data-method=")[0]
        ttft = spreads[m]["ttft_s"]
        assert f"{x.ttft_s:.2f} s <small" in card and f"[{ttft.low:.2f}–{ttft.high:.2f}]" in card, card
        if m != "ar":
            ratio = f"<b>{x.decode_tps / c['ar'].decode_tps:.2f}×</b> / <b>{x.e2e_tps / c['ar'].e2e_tps:.2f}×</b>"
            assert ratio in card, card
    medians = render_cards(records, {}, spreads)  # no middle runs named: the rounds' medians
    assert f"{spreads['sd']['ttft_s'].median:.2f} s <small" in medians
    meta = {"median_runs": {"ar": 1, "sd": 1, "mirror": 1}}
    sub = re.search(r'class="msd-verdict-sub">([^<]*)<', render_statistics(records, {}, meta, 3, spreads))[1]
    assert f"SD {c['sd'].decode_tps / c['ar'].decode_tps:.2f}× AR" in sub, sub
    assert "(each method&#x27;s middle run of 3, as in the cards)" in sub, sub


def test_the_takeaway_says_whether_sd_s_gain_is_proven_and_what_the_gate_did():
    """The one-sentence takeaway reads SD's gain from the interleaved ranges (proven only when
    every SD run beat every AR run), says that the gated Mirror-SD ran as SD where it ran its
    lanes in turn, and labels its figures for other hardware as projections."""
    from ui.results import takeaway
    from ui.why import lanes_at_once
    records = dict(tiny_records())
    def sd(*values):  # SD's three rounds beside AR's 4.0, 3.6, 4.2 tok/s
        return {"ar": {"e2e_tps": spread([4.0, 3.6, 4.2])}, "sd": {"e2e_tps": spread(list(values))}}
    # SD's slowest round is slower than AR's fastest, yet SD was faster round by round
    assert "beat plain decoding in all 3 rounds: " in takeaway(records, sd(5.0, 4.1, 5.5))
    unproven = takeaway(records, sd(5.0, 3.5, 5.5))
    assert "but it was faster in only 2 of the 3 rounds: not proven" in unproven
    assert "beat" not in unproven
    lost = takeaway(records, sd(3.0, 3.5, 3.9))
    assert "lost to plain decoding in all 3 rounds" in lost
    # hand-built ranges without rounds: proven only when every SD run beat every AR run
    ranges = {"ar": {"e2e_tps": Spread(4.0, 3.6, 4.2, 3)}, "sd": {"e2e_tps": Spread(5.0, 4.1, 5.5, 3)}}
    assert "not proven: the two methods' ranges over the 3 runs overlap" in takeaway(records, ranges)
    at_once, steps = lanes_at_once(records["mirror"])  # the page's Mirror-SD: lanes at once in every step
    assert 2 * at_once >= steps  # (as timed: a tiny step can end before its draft starts)
    every = f"in all {steps} of its steps" if at_once == steps else f"in {at_once} of its {steps} steps"
    assert f"Its draft wrote beside the target {every}" in takeaway(records)
    records["mirror-gated"] = _serial_after(records["mirror"], 0)  # its gate ran every step in turn
    assert lanes_at_once(records["mirror-gated"])[0] == 0
    gated = takeaway(records, None, {"over_sd": {"b": 1.6, "c": 1.2}, "over_sd_rounds": {"b": [0.9, 1.7, 2.0]}})
    assert "in one run" in gated
    steps = lanes_at_once(records["mirror-gated"])[1]
    from ui.why import steps_in_turn
    turns = steps_in_turn(records["mirror-gated"])
    assert turns == steps - 1 - sum(1 for e in records["mirror-gated"].events  # the last step drafts no next window
                                    if isinstance(e, Verify) and not e.drafted)
    how = (f"in all {turns} of its steps that drafted a next window" if turns == steps - 1 else
           f"in {turns} of its {steps} steps (the last had no next window to draft)")
    assert (f"Its gate ran it as SD (the draft, then the target) {how}: timing both orders as it runs, it found taking turns the faster on "
            "these shared cores, and taking turns it prices its windows from SD's measured costs.") in gated, gated
    from dataclasses import replace as dc_replace
    from ui.figures import speeds
    from ui.results import _mirror_takeaway
    c = cards(records)
    alike = dict(c, **{"mirror-gated": dc_replace(c["mirror-gated"], e2e_tps=c["mirror"].e2e_tps)})
    items = _mirror_takeaway(alike, speeds(alike), None, records)
    assert [lead for lead, _ in items] == ["Mirror-SD", "Mirror-SD (gated)"]  # the two runs' speeds alike
    slower = dict(c, **{"mirror-gated": dc_replace(c["mirror-gated"], e2e_tps=c["mirror"].e2e_tps / 1.2)})
    items = _mirror_takeaway(slower, speeds(slower), None, records)
    assert items[-1] == ("Mirror-SD against Mirror-SD (gated)", "Overlapping every step beat the gate here.")
    faster = dict(c, **{"mirror-gated": dc_replace(c["mirror-gated"], e2e_tps=c["mirror"].e2e_tps * 1.2)})
    items = _mirror_takeaway(faster, speeds(faster), None, records)
    assert items[-1][1] == "The gate's choice paid here: overlapping every step was slower."
    ratio = c["mirror"].e2e_tps / c["sd"].e2e_tps
    assert f"Its draft wrote beside the target {every}, {ratio:.2f}× SD end to end: " in gated, gated
    said = gated.split(f"{ratio:.2f}× SD end to end: ")[1]
    assert said.startswith("these runs cannot tell it from SD" if min(ratio, 1 / ratio) >= 1 - LEVEL else
                           "overlapping paid" if ratio > 1 else "sharing the cores cost more"), said
    assert "Projected, not measured (the chart below, from the steps of the runs shown): Mirror-SD 1.60× SD with " \
           "the draft on a device of its own (the runs shown replayed; the 3 runs' own: 0.90–2.00×, inconclusive); " \
           "1.20× SD on an accelerator pair." in gated, gated
    assert takeaway({m: r for m, r in records.items() if m != "ar"}) == ""


def test_the_pay_chart_sets_the_measured_ratios_beside_the_what_if_rows_with_their_spread():
    """The chart's measured bars are each Mirror-SD run's end-to-end speed over SD's, the tiles'
    figures; its projected bars are the What-if rows (b) and (c), the runs shown's replay, over
    interleaved runs with the range of the runs' own projections; every projected bar says it is one."""
    from mirror_sd.models.tiny import LAYERS
    from ui.figures import speeds
    from ui.paychart import bars, render_pay_chart
    from ui.whatif import best_projection
    records = tiny_records()
    state = {"records": records, "settings": {"gamma": 4, "kappa": 8, "branch_budget": 2},
             "meta": {"target_layers": LAYERS, "exit_layer": LAYERS // 2}}
    proj = best_projection(state)
    b = proj["over_sd"]["b"]  # the tiny run's own projection, timing-dependent: rounds around it
    proj = dict(proj, over_sd_rounds={"b": [0.7 * b, 1.3 * b, 0.9 * b]})
    c = cards(records)
    rows = bars(c, None, proj)
    sp = speeds(c)
    assert [r["kind"] for r in rows] == ["measured", "projected", "projected"]
    assert rows[0]["value"] == sp["mirror"][0] / sp["sd"][0] and "this run" in rows[0]["note"]
    assert [r["value"] for r in rows[1:]] == [b, proj["over_sd"]["c"]]  # (b): the runs shown's, not the rounds' median
    assert (rows[1]["low"], rows[1]["high"]) == (0.7 * b, 1.3 * b) and rows[2]["low"] is None
    html = render_pay_chart(proj, c)
    assert html.count("msd-proj-tag") == 2 and "(What if, row (b))" in html and "(What if, row (c))" in html
    assert f"{b:.2f}× <small>({0.7 * b:.2f}–{1.3 * b:.2f}×)" in html and f"{proj['over_sd']['c']:.2f}×" in html
    assert html.count("<small>(one run)</small>") == 1  # row (c): one figure, no range, said so
    assert "a dot per run&#x27;s own projection, the whisker their range" in html
    unsure = round(0.7 * b, 2) < 1 < round(1.3 * b, 2)  # row (b)'s whisker across 1×: the bar says so
    assert html.count('class="pc-unsure">inconclusive<') == (1 if unsure else 0)
    across = dict(proj, over_sd=dict(proj["over_sd"], b=1.05), over_sd_rounds={"b": [0.8, 1.2, 0.9]})
    assert render_pay_chart(across, c).count('class="pc-unsure">inconclusive<') == 1
    above = dict(proj, over_sd=dict(proj["over_sd"], b=1.3), over_sd_rounds={"b": [1.1, 1.2, 1.4]})
    assert "inconclusive" not in render_pay_chart(above, c)
    assert f"that pair&#x27;s draft forward {proj['draft_share']['c']:.0%} of its target&#x27;s" in html
    assert "a draft forward at" not in html  # this pair's cost: the verdict's measured one, said once
    spreads = {m: {"e2e_tps": Spread(x.e2e_tps, x.e2e_tps * .9, x.e2e_tps * 1.1, 3)} for m, x in c.items()}
    assert "medians of 3 runs" in bars(c, spreads, proj)[0]["note"]
    assert render_pay_chart({}, c) == ""  # nothing projected: no chart
    assert 'class="msd-paychart"' in render_verdict(records, state["meta"], proj)
    # a projected whisker below the measured bar: the chart says why a model can fall below it,
    # with what the same model makes of this machine (row (a)); above it all, nothing
    low = dict(proj, over_sd_rounds={"b": [rows[0]["value"] * 0.5, 1.3]}, over_sd_run_settings={"a": 0.93})
    note = render_pay_chart(low, c)
    assert "Why a projection can fall below a bar measured here" in note, note
    decode = c["mirror"].decode_tps / c["sd"].decode_tps  # the projections price decode: set beside decode
    assert f"Mirror-SD is 0.93× SD against {decode:.2f}× measured in decode" in note, note
    assert "that gap is the model's error here" in note.replace("&#x27;", "'")
    same = render_pay_chart(dict(low, over_sd_run_settings={"a": round(decode, 3)}), c)
    assert "the model matches it here" in same and "gap" not in same  # no gap: none said
    high = {"over_sd": {"b": rows[0]["value"] + 1, "c": rows[0]["value"] + 1}, "over_sd_rounds": {}}
    assert "Why a projection" not in render_pay_chart(high, c)




def test_the_inspector_opens_on_the_zoomed_step_of_the_zoomed_run():
    """One step told twice: the inspector opens on the step the zoom draws when it opens on the
    zoom's run, else on the run's first rejection or miss."""
    from ui.zoom import opening_step, zoom_record, zoom_step
    records = tiny_records()
    zoomed = zoom_record(records)
    assert zoomed is not None and zoom_step(zoomed) is not None
    assert opening_step(records, zoomed) == zoom_step(zoomed)
    assert opening_step(records, records["sd"]) == instructive_step(records["sd"])
    assert opening_step(records, None) == 0


def test_the_race_replays_each_method_s_middle_run():
    """Each method's run shown, and raced, is its median run by end-to-end speed (the later
    among equals), whichever rounds the others' come from: the race's finishing order is the
    medians' order and no pane shows its method at an extreme of its runs."""
    from ui.figures import median_runs
    from ui.frames import round_rank
    from ui.live import race_message
    records = tiny_records()

    def rounds_of(speeds):
        out = []
        for row in speeds:
            r = cards(records)
            for m, tps in zip(("ar", "sd", "mirror"), row):
                r[m].e2e_tps = tps
            out.append({m: r[m] for m in ("ar", "sd", "mirror")[:len(row)]})
        return out
    rounds = rounds_of([(10.05, 12.04, 9.05), (11.07, 13.06, 12.06), (10.05, 9.08, 13.09)])
    shown = median_runs(rounds)
    assert shown == {"ar": 2, "sd": 0, "mirror": 1}  # AR's two equal runs: the later
    assert set(round_rank(rounds, shown).values()) == {"the middle of its 3 runs by speed"}
    picked = {m: rounds[i][m].e2e_tps for m, i in shown.items()}
    assert sorted(picked, key=picked.get) == ["ar", "sd", "mirror"]  # the medians' order: AR 10.05, SD 12.04, Mirror-SD 12.06
    assert json.loads(race_message(records, shown=3))["runs_of"] == 3
    assert json.loads(race_message(records))["runs_of"] is None


def test_beside_the_draft_counts_only_steps_whose_lanes_worked_at_once():
    """A gated Mirror-SD that ran its lanes in turn has no verify 'beside the draft': the
    comparison then takes its always-overlapped twin's steps, or shows none."""
    import copy
    from mirror_sd.engine.events import Span
    from ui.why import costs, steps_at_once
    records = copy.deepcopy(tiny_records())
    once = steps_at_once(records["mirror"])
    assert once and costs(records).get("beside_method") == "mirror"
    twin = copy.deepcopy(records["mirror"])
    rec = records["mirror"]
    keep = [i for i, e in enumerate(rec.events)
            if not (isinstance(e, Span) and e.lane == "draft" and e.step in once)]
    rec.events, rec.times_ns = [rec.events[i] for i in keep], [rec.times_ns[i] for i in keep]
    assert not steps_at_once(records["mirror"])
    assert "verify_beside" not in costs(records) and verify_slowdown(records) is None
    records["mirror-gated"] = twin
    c = costs(records)
    assert c["beside_method"] == "mirror-gated" and len(c["verify_beside_all"]) <= len(once)
    assert verify_slowdown(records)["method"] == "mirror-gated"



def test_the_zoom_says_how_many_steps_are_like_the_one_it_draws():
    """The drawn step's kind counted over the run: in a run whose lanes overlapped in every step
    the hits among them are the card's hits (a miss: its misses); a step drawn from a run whose
    gate ran the rest in turn reads as one of the few of its kind."""
    from ui.runs import analyse
    rec = tiny_records()["mirror"]
    n = len(analyse(rec).steps)
    html = render_zoom(rec, {"target_layers": 4, "exit_layer": 2})
    alike, of, kind, kept = re.search(r"; (\d+) of its (\d+) steps like this one \(the lanes at once, "
                                      r"(a late hit|a branch hit ready by the verdict|no branch hit)"
                                      r"(, drafted tokens kept|, no drafted token kept|)", html).groups()
    card = cards({"mirror": rec})["mirror"]
    steps = analyse(rec).steps
    hit = {sv.step: sv for sv in steps.values() if any(b.status == "taken" for b in sv.rollouts)}
    late = {s for s, sv in hit.items() if sv.late_ms is not None}
    kept_any = {s for s, sv in hit.items() if sv.verify is not None and sv.verify.accepted}
    group = {"a late hit": late, "a branch hit ready by the verdict": set(hit) - late}.get(kind)
    if group is None:  # no branch hit: the misses
        assert kept == "" and int(alike) == card.misses
    else:  # a hit, counted with the others whose verdict kept drafted tokens (or none) as it did
        assert kept, html
        want = group & kept_any if kept == ", drafted tokens kept" else group - kept_any
        assert len(hit) == card.hits and int(alike) == len(want), (alike, kind, kept, card)
    assert int(of) == n
    mostly = _serial_after(rec, 2)  # lanes at once in steps 0 and 1 only (where the run had them at once)
    from ui.why import steps_at_once
    from ui.zoom import how_typical
    early = sorted(steps_at_once(mostly) & {0, 1})  # timed: a tiny step can end before the draft starts
    assert early, steps_at_once(rec)
    kinds = r"(a late hit|a branch hit ready by the verdict|no branch hit)(, drafted tokens kept|, no drafted token kept)?"
    assert re.fullmatch(rf"[12] of its {n} steps like this one \(the lanes at once, {kinds}\)", how_typical(mostly, early[-1]))
    assert re.fullmatch(rf"\d+ of its {n} steps like this one \(the lanes in turn, {kinds}\)", how_typical(mostly, 2))


def test_the_zoom_draws_the_typical_hit_not_the_best_case():
    """Among the steps whose lanes overlapped and hit, the zoom draws the one whose wait for its
    branch after the verdict is the median of theirs, however quick the quickest was."""
    import dataclasses
    from mirror_sd.engine.events import Span
    from ui.runs import RunRecord, analyse, verdict_outcome
    from ui.steps import after_verdict_s
    from ui.zoom import zoom_step
    rec = tiny_records(64, 2)["mirror"]  # a longer run with shorter windows: several hits
    steps = analyse(rec).steps
    hits = [s for s in steps if s > 0 and verdict_outcome(steps[s]) == "hit"
            and {"prefix", "branches"} <= {sp.label for sp in rec.spans if sp.step == s}]
    assert len(hits) >= 3, hits
    # the hits' branches done 1, 40, 80 ... ms after their verdicts: the median's step is drawn
    waits = {s: 1 + 40 * i for i, s in enumerate(hits)}
    spread = RunRecord("mirror", t0_ns=rec.t0_ns, token_texts=rec.token_texts, id_texts=rec.id_texts)
    for ev, t in zip(rec.events, rec.times_ns):
        if isinstance(ev, Span) and ev.step in waits and ev.label == "branches":
            verdict = max(sp.end_ns for sp in rec.spans if sp.step == ev.step and sp.label in ("suffix", "accept"))
            if ev.end_ns >= verdict - 10**6 or ev is max((sp for sp in rec.spans if sp.step == ev.step and sp.label == "branches"), key=lambda sp: sp.end_ns):
                ev = dataclasses.replace(ev, end_ns=verdict + waits[ev.step] * 1_000_000)
        spread.add(ev, t)
    got = {s: after_verdict_s(spread, s) * 1e3 for s in hits}
    middle = sorted(got.values())[(len(got) - 1) // 2]
    drawn = zoom_step(spread)
    assert drawn in hits and abs(got[drawn] - middle) < 1e-6, (drawn, got)
    assert got[drawn] > min(got.values())  # not the quickest


def test_the_race_says_when_its_finishing_order_is_within_noise():
    """The race's last line: where the rounds' ranges overlap the winner's, its lead is within
    the machine's noise (over whom, where the runs tell some apart); where they do not, nothing."""
    from ui.figures import order_within_noise
    from ui.live import race_message
    c = cards(tiny_records())
    overlap = {m: {"e2e_tps": Spread(5.0 + i * 0.1, 4.5, 5.6, 3)} for i, m in enumerate(c)}
    said = order_within_noise(c, overlap)
    top = label(winner(c, overlap))
    level = [label(m) for m in level_with(c, winner(c, overlap), overlap)]
    assert level[0] == top and len(level) == len(c)
    def names(xs):
        return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]
    assert said == (f"Over these 3 runs, {top} had the best time, but the runs cannot tell it from "
                    f"{names(level[1:])}: within this machine's noise."), said
    # some told apart from the winner: the tie names only those it cannot tell from it
    some = {m: ({"e2e_tps": Spread(1.0, 0.9, 1.1, 3)} if m == "ar" else x) for m, x in overlap.items()}
    near = [label(m) for m in level_with(c, winner(c, some), some)]
    assert "AR" not in near and len(near) == len(c) - 1
    assert order_within_noise(c, some) == (f"Over these 3 runs, {near[0]} had the best time, but the runs cannot "
                                           f"tell it from {names(near[1:])}: within this machine's noise."), near
    apart = {m: {"e2e_tps": Spread(5.0 + 2 * i, 4.9 + 2 * i, 5.1 + 2 * i, 3)} for i, m in enumerate(c)}
    assert order_within_noise(c, apart) == ""
    assert json.loads(race_message(tiny_records(), tie=said))["tie"] == said


def test_a_tile_flags_a_run_far_off_its_median():
    """A run 30% or more off its method's median widens the range that decides whether two
    methods can be told apart: the tile says so; a steady method's tile does not."""
    records = tiny_records()
    c = cards(records)
    steady = {m: {"e2e_tps": Spread(5.0, 4.8, 5.2, 3)} for m in c}
    assert "one run far off" not in render_verdict(records, {}, None, steady)
    odd = dict(steady, sd={"e2e_tps": Spread(5.0, 2.9, 5.2, 3)})
    html = render_verdict(records, {}, None, odd)
    sd_tile = html.split('data-method="sd"')[1].split('data-method=')[0]
    assert "one run far off" in sd_tile and html.count("one run far off") == 1, html


def test_projections_below_sd_are_not_called_a_gain():
    """Where no projected profile passes SD, the takeaway asks whether Mirror-SD would pay
    elsewhere and answers no, and the hardware line does not say this machine hides a gain."""
    from ui.results import hardware_line, takeaway, takeaway_parts
    records = tiny_records()
    below = {"over_sd": {"b": 0.88, "c": 0.93}}
    said = takeaway(records, None, below)
    assert [lead for lead, _ in takeaway_parts(records, None, below)][-1] == "Would Mirror-SD pay elsewhere?"
    from ui.results import takeaway_items
    assert "<b>Would Mirror-SD pay elsewhere?</b> Not from" in takeaway_items(takeaway_parts(records, None, below))
    assert "Not from the steps of this run: projected, not measured (the chart below), Mirror-SD 0.88× SD" in said, said
    line = hardware_line(records, {}, below)
    assert "cannot show what Mirror-SD gains" not in line and "no more than SD there either" in line, line
    spread = dict(below, over_sd_rounds={"b": [0.85, 1.8, 0.9]})  # the runs on both sides of 1×: no claim
    assert "no more than SD" not in hardware_line(records, {}, spread)
    above = {"over_sd": {"b": 1.4, "c": 0.93}}
    assert "Projected, not measured (the chart below, from the steps of this run): Mirror-SD 1.40× SD" in takeaway(records, None, above)
    assert "no more than SD" not in hardware_line(records, {}, above)


def test_a_pane_says_where_its_run_stands_among_its_method_s_rounds():
    """A pane whose run was its method's fastest (or slowest) of the rounds says so in its head
    (a loaded trace's, or a stopped job's, may be), and its middle run as the middle."""
    from dataclasses import replace as dc_replace
    from ui.frames import round_rank
    from ui.render import render_pane
    records = tiny_records()
    base = cards(records)
    rounds = [{m: dc_replace(x, e2e_tps=x.e2e_tps * f) for m, x in base.items()} for f in (1.0, 1.2, 0.9)]
    rounds[1]["sd"] = dc_replace(base["sd"], e2e_tps=base["sd"].e2e_tps * 0.5)  # SD's slowest round
    ranks = round_rank(rounds, {m: 1 for m in base})
    assert ranks["ar"] == "its fastest of 3 runs" and ranks["sd"] == "its slowest of 3 runs"
    assert round_rank(rounds, {"ar": 0})["ar"] == "the middle of its 3 runs by speed"
    assert round_rank(rounds[:1], {"ar": 0}) == {} and round_rank(rounds, None) == {}
    head = render_pane("sd", records["sd"], "done", rank=ranks["sd"])
    assert "tok/s end to end <span class=\"msd-rank\">(its slowest of 3 runs)</span>" in head


def test_the_trade_says_when_sd_and_mirror_sd_drafted_windows_of_other_lengths():
    """Where SD's and Mirror-SD's window medians differ, the drafting picture says so with both
    methods' windows (as the cards give them) and why (the overlapped steps' own prices, or the
    costs moving between runs); where they agree, nothing."""
    from dataclasses import replace

    from ui.results import windows_note
    c = cards(tiny_records())
    same = dict(c, sd=replace(c["sd"], windows=(1, 3, 5)), mirror=replace(c["mirror"], windows=(2, 3, 4)))
    assert windows_note(same) == ""
    other = dict(c, sd=replace(c["sd"], windows=(2, 2, 5)), mirror=replace(c["mirror"], windows=(1, 7, 9)))
    text = windows_note(other)
    assert "SD drafted 2–5, median 2 tokens a window, Mirror-SD 1–9, median 7." in text, text
    over = dict(other, mirror=replace(other["mirror"], hits=2, misses=1))
    assert "Steps in turn price their windows from the same measured costs, which move with the machine " \
           "between runs; Mirror-SD's 3 overlapped steps price drafting at what the target waited for it" \
           in windows_note(over)
    one = dict(other, mirror=replace(other["mirror"], hits=1, misses=0))
    assert "Mirror-SD's 1 overlapped step prices drafting" in windows_note(one)
    turns = dict(other, mirror=replace(other["mirror"], hits=0, misses=0))
    assert "Both price their windows from the same measured costs" in windows_note(turns)
    assert windows_note({m: x for m, x in other.items() if m != "sd"}) == ""


def test_steps_that_drafted_nothing_are_said_as_plain_decodes_not_as_turns():
    """A gated Mirror-SD whose priced windows drafted nothing in most steps decoded plainly
    there: no lanes in turn, no gate's judgement. The tile's badge, the takeaway and the lanes
    line say so (SD's drafted steps beside it), never "took turns as SD does"."""
    from dataclasses import replace

    from mirror_sd.engine.events import Span
    from ui.results import _lanes_line, takeaway
    from ui.runs import RunRecord
    from ui.why import lanes_at_once, lanes_badge, steps_undrafted
    records = dict(tiny_records())
    own = records["mirror"]
    first = min(e.step for e in own.events if isinstance(e, Verify))
    keep = [(replace(e, drafted=[], accepted=0) if isinstance(e, Verify) and e.step > first else e, t)
            for e, t in zip(own.events, own.times_ns)
            if not (isinstance(e, Span) and e.lane == "draft" and e.step > first)]
    rec = RunRecord("mirror", [e for e, _ in keep], [t for _, t in keep], own.t0_ns,
                    list(own.token_texts), dict(own.id_texts))
    at_once, steps = lanes_at_once(rec)
    decoded = steps_undrafted(rec)
    assert decoded == steps - 1 and at_once <= 1
    assert lanes_badge("mirror", rec) == f"priced windows: no draft in {decoded} of {steps} steps"
    records["mirror"] = rec
    said = takeaway(records)
    sd = cards(records)["sd"]
    assert f"It drafted nothing in {decoded} of its {steps} steps, each a plain target decode" in said, said
    assert f"SD, pricing its own steps, drafted a window in {sd.verify_steps - sd.undrafted} of its {sd.verify_steps}." in said
    assert "took turns as SD does" not in said
    split = "2 cores; lanes overlapped in 1 of 7 steps"
    rec = RunRecord("mirror", [replace(e, stats={**e.stats, "lane_split": split}) if e is own.finish else e
                               for e in rec.events], list(rec.times_ns), rec.t0_ns, list(rec.token_texts),
                    dict(rec.id_texts))
    line = _lanes_line(rec)
    assert f"{decoded} drafted nothing (a plain decode)" in line, line


def test_the_zoom_splits_the_draft_s_branch_work_at_the_early_exit():
    """The zoom's beats give the draft's branch forwards before the exit's guesses reach it (on
    its own guess) and after apart: the two add up to the step's branch spans; all branches'
    forwards after the exit are named apart from when the taken branch was ready, and never
    exceed it (one lane: its forwards after the exit all end by then)."""
    from ui.steps import branch_ms as _branch_ms
    from ui.zoom import zoom_record, zoom_step
    rec = zoom_record(tiny_records())
    step = zoom_step(rec)
    spans = [s for s in rec.spans if s.step == step]
    exit_at = max(s.end_ns for s in spans if s.label == "exit_head")
    before, after = _branch_ms(spans, exit_at)
    total = sum(s.end_ns - s.start_ns for s in spans if s.label == "branches") / 1e6
    assert abs(before + after - total) < 1e-6 and before >= 0 and after >= 0
    html = render_zoom(rec, {"branch_budget": 2})
    text = re.sub(r"<[^>]+>", "", html)
    assert (f"all branches together took {after:.0f} ms of draft forwards after the exit "
            f"(the short gaps between forwards not counted)") in text, text
    assert "from the exit on" not in text and "needed" not in text
    if before >= 0.5:
        assert f"own best guess of the verdict ({before:.0f} ms of forwards)" in html
    ready = re.search(r"the taken branch \(the next window\) was ready (?:by )?(\d+) ms after the exit", text)
    if ready:  # a hit: the rule is drawn
        assert round(after) <= int(ready.group(1)) + 1, (after, ready.group(1))


def test_the_zoom_rule_s_figures_add_up_to_the_wait_its_caption_gives():
    """Where the next window came after the verdict, the rule's figures as shown add up (when the
    taken branch was ready after the exit = what the target took + its wait) and its wait is the
    caption's; where it came before, it was ready by the draft's last branch forward, within
    what the target took."""
    import dataclasses

    from mirror_sd.engine.events import Span
    from ui.runs import RunRecord, analyse, verdict_outcome
    from ui.zoom import zoom_step
    rec = tiny_records()["mirror"]
    steps = analyse(rec).steps
    hit = zoom_step(rec)
    assert verdict_outcome(steps[hit]) == "hit"
    verdict = max(sp.end_ns for sp in rec.spans if sp.step == hit and sp.label in ("suffix", "accept"))
    late = RunRecord("mirror", t0_ns=rec.t0_ns, token_texts=rec.token_texts, id_texts=rec.id_texts)
    for ev, t in zip(rec.events, rec.times_ns):  # the hit's branch done 2.6 ms after its verdict
        if isinstance(ev, Span) and ev.step == hit and ev.label == "branches" and ev.end_ns >= verdict - 10**6:
            ev = dataclasses.replace(ev, end_ns=verdict + 2_600_000)
        late.add(ev, t)
    text = re.sub(r"<[^>]+>", "", render_zoom(late, {"target_layers": 4}, step=hit))
    need, have, wait = map(int, re.search(r"was ready (\d+) ms after the exit, .*? took (\d+) ms, so the target "
                                          r"waited (\d+) ms for it", text).groups())
    assert need == have + wait and wait == 3, (need, have, wait)
    assert "the draft finished it 3 ms after the verdict" in text
    early = RunRecord("mirror", t0_ns=rec.t0_ns, token_texts=rec.token_texts, id_texts=rec.id_texts)
    for ev, t in zip(rec.events, rec.times_ns):  # the hit's branch done at its verdict
        if isinstance(ev, Span) and ev.step == hit and ev.label == "branches" and ev.end_ns >= verdict - 10**6:
            ev = dataclasses.replace(ev, end_ns=min(ev.end_ns, verdict))
        early.add(ev, t)
    text = re.sub(r"<[^>]+>", "", render_zoom(early, {"target_layers": 4}, step=hit))
    need, have = map(int, re.search(r"was ready by (\d+) ms after the exit, .*? took (\d+) ms, so the next "
                                    r"window was ready at the verdict", text).groups())
    assert need <= have, (need, have)


def test_the_projected_figure_lies_within_the_range_it_is_given_with():
    """The runs shown (each method's middle run) are a set no round ran as such: their
    projection (the What-if tables' figure, the one the page quotes) can lie outside the rounds'
    own. The range said beside it and the chart's whisker span the rounds' and the runs shown's,
    so every figure the page prints for the profile lies within it."""
    from ui.paychart import bars
    from ui.whatif import range_values, round_span, rounds_words
    p = {"over_sd": {"c": 0.90}, "over_sd_rounds": {"c": [0.93, 0.99, 0.95]}}
    assert round_span(p, "c") == [0.93, 0.99, 0.95] and sorted(range_values(p, "c")) == [0.90, 0.93, 0.95, 0.99]
    assert rounds_words(p, "c") == "the runs shown replayed (with each of the 3 runs' own projections, the range 0.90–0.99×)"
    row = next(r for r in bars(cards(tiny_records()), None, p) if r["kind"] == "projected")
    assert (row["value"], row["low"], row["high"]) == (0.90, 0.90, 0.99)
    assert round_span({"over_sd": {"c": 0.9}, "over_sd_rounds": {"c": [0.95]}}, "c") == []  # one round: no range


def test_a_verify_no_dearer_than_a_decode_is_said_so_beside_the_two_figures(monkeypatch):
    """A 2-token verify measured no dearer than the 1-token forward (medians over other steps):
    Statistics says why, so the two figures do not read as a contradiction; dearer, nothing."""
    import ui.results as results
    base = {"target": 0.172, "draft": 0.07, "verify_window": 1, "verify_alone": 0.167, "verify_beside": 0.25,
            "beside_method": "mirror"}
    monkeypatch.setattr(results, "costs", lambda done: dict(base))
    text = results.render_lanes({})
    assert "took 167 ms alone (SD)" in text and "no slower than the 1-token forward above" in text, text
    monkeypatch.setattr(results, "costs", lambda done: dict(base, verify_alone=0.2))
    assert "no slower" not in results.render_lanes({})


def test_the_gate_badge_counts_steps_in_turn_as_the_card_does():
    """A gated Mirror-SD that ran its lanes in turn: the badge counts the steps whose next window
    was drafted after the verdict, the last step (no next window) and plain decodes apart, so
    its count, the lanes at once and those add up to the verify steps."""
    from mirror_sd.engine.events import Verify
    from ui.why import lanes_at_once, lanes_badge, steps_in_turn, steps_undrafted
    rec = _serial_after(tiny_records()["mirror"], 0)
    at_once, steps = lanes_at_once(rec)
    turns = steps_in_turn(rec)
    last_drafted = any(e.step == max(v.step for v in rec.events if isinstance(v, Verify)) and e.drafted
                       for e in rec.events if isinstance(e, Verify))
    assert at_once == 0 and turns + steps_undrafted(rec) + last_drafted == steps
    assert lanes_badge("mirror", rec) == f"ran as SD: draft, then target, in {_counted(turns, steps, short=True)}"


def test_a_gated_mirror_sd_that_ran_as_sd_is_named_so_in_the_headline_and_on_its_tile():
    """Where the gate ran Mirror-SD as SD in most of its steps, its top figure is SD's way of
    working: the headline says so with the counts, its tile "ran as SD", never "fastest"; a run
    whose lanes overlapped, and the always-overlapped twin, say nothing of it."""
    from ui.results import _scoreboard
    from ui.why import lanes_at_once, ran_as_sd, steps_in_turn
    records = dict(tiny_records())
    overlapped = records["mirror"]
    records["mirror-gated"] = overlapped
    records["mirror"] = rec = _serial_after(overlapped, 0)
    c = cards(records)
    for m, tps in (("ar", 8.0), ("sd", 9.0), ("mirror", 12.0), ("mirror-gated", 9.5)):
        c[m].e2e_tps, c[m].e2e_speedup, c[m].complete = tps, tps / 8.0, True
    steps = lanes_at_once(rec)[1]
    assert ran_as_sd("mirror", rec) == (steps_in_turn(rec), steps)
    assert ran_as_sd("mirror-gated", overlapped) is None and ran_as_sd("sd", records["sd"]) is None
    from ui.figures import verdict_parts
    head, reason = verdict_parts(c, records, {})
    said = (f"Mirror-SD ran as SD (the draft, then the target) in {_counted(steps_in_turn(rec), steps)}, "
            f"so its speed is not the overlap's.")
    assert said in head and head.count("ran as SD") == 1, head
    # the reason (Statistics) says it once more, where it sets the run against SD's
    assert reason.count("ran as SD") == 1 and "so its difference from SD is not the overlap's" in reason, reason
    tile = _scoreboard(c, None, records)
    # no "fastest" on a Mirror-SD that worked as SD did: its badge says how it ran, and its standing
    badge = re.search(r'data-method="mirror".*?msd-tile-best[^>]*>([^<]*)<', tile)[1]
    assert badge == "ran as SD, top speed", badge
    # the lead names the fastest, and sets every Mirror-SD against SD, so it agrees with the headline
    from ui.figures import lead_words
    lead = lead_words(c, records, {})
    assert lead.startswith("In this one run, Mirror-SD wrote the same") and "1.50× as fast" in lead, lead
    assert lead.endswith("Mirror-SD beat SD in this one run: Mirror-SD 1.33× SD's speed."), lead
    assert "“gated”: Mirror-SD picks, step by step" in tile and "always overlapped" not in tile
    at_once, n = lanes_at_once(overlapped)
    assert 2 * at_once >= n  # the tiny run overlapped its lanes in most steps
    records["mirror"] = overlapped
    assert "ran as SD" not in verdict(c, records, {}) + _scoreboard(c, None, records)


def test_the_trade_of_a_gated_mirror_sd_that_ran_as_sd_credits_nothing_to_the_overlap():
    """Where the overlap gate ran Mirror-SD as SD in most steps and the runs cannot tell it from
    SD, the trade (the verdict's reason, and Statistics, which shows it) says so with the counts
    and calls their difference this machine's run-to-run spread, never a cost of its verify
    beside the draft; told apart, the difference is still not the overlap's; a run whose lanes
    overlapped keeps its cause."""
    from ui.figures import verdict_parts
    from ui.why import ran_as_sd
    records = dict(tiny_records())
    overlapped = records["mirror"]
    records["mirror"] = rec = _serial_after(overlapped, 0)
    turns, steps = ran_as_sd("mirror", rec)

    def spreads(sd, mirror):
        rounds = [cards(records) for _ in range(3)]
        for r, x in zip(rounds, (1.05, 0.98, 1.2)):
            r["ar"].e2e_tps, r["sd"].e2e_tps, r["mirror"].e2e_tps = 5.0, sd * x, mirror * x
        return repeat_summary(rounds)

    level = spreads(10.0, 9.9)  # SD first by its median, Mirror-SD's range overlapping it
    reason = verdict_parts(cards(records), records, {}, level)[1]
    lead, first, *rest = reason.strip().split(ITEM)
    said = (f"Mirror-SD ran as SD (the draft, then the target) in {_counted(turns, steps)}, so its "
            f"difference from SD is within this machine's run-to-run spread, not a cost or a gain of the overlap: "
            f"both took turns, each choosing its windows from the costs it measured.")
    assert (lead, first) == ("The trade:", said), reason
    assert "as long beside the draft" not in reason  # its few steps beside the draft explain nothing
    stats = render_statistics(records, {}, {}, 3, level)
    assert f"<b>The trade:</b> {said}".replace("'", "&#x27;") in stats, stats
    apart = verdict_parts(cards(records), records, {}, spreads(10.0, 6.0))[1]  # every SD run faster
    first = apart.strip().split(ITEM)[1]
    assert first.startswith(f"Mirror-SD ran as SD (the draft, then the target) in {_counted(turns, steps)}, "
                            f"so its difference from SD is not the overlap's. "), apart
    assert "run-to-run spread" not in apart
    records["mirror"] = overlapped  # its lanes at once in most steps: the measured cause, no such words
    assert "ran as SD" not in verdict_parts(cards(records), records, {}, level)[1]


def _rounds_at(records, speeds_by_round):
    """Interleaved rounds of `records`' cards with the given end-to-end speeds (tok/s), per
    round a dict by method."""
    rounds = [cards(records) for _ in speeds_by_round]
    for r, tps in zip(rounds, speeds_by_round):
        for m, v in tps.items():
            r[m].e2e_tps, r[m].decode_tps, r[m].e2e_speedup = v, v, v / tps["ar"]
    return repeat_summary(rounds)


def test_the_lead_says_only_what_the_rounds_tell():
    """The verdict's first line: SD against plain decoding and Mirror-SD against SD, each as far
    as the interleaved runs tell it (faster in every round, by at least LEVEL), the figure the
    tiles show; a tie reads 'no faster', a clear loss 'slower', and on one shared device why."""
    from ui.figures import lead_words, machine_words
    records = tiny_records()
    c = cards(records)
    shared = {"target_device": "cpu", "draft_device": "cpu"}
    n = c["ar"].tokens
    tie = _rounds_at(records, [{"ar": 10, "sd": 13, "mirror": 13.2}, {"ar": 9, "sd": 12, "mirror": 11.8},
                               {"ar": 10, "sd": 13.1, "mirror": 13}])
    said = lead_words(c, records, shared, tie)
    assert said.startswith(f"SD wrote the same {n} tokens as plain decoding, {13 / 10:.2f}× as fast. "), said
    assert said.endswith("Mirror-SD did not beat SD."), said
    why = ": its draft is too slow"
    assert lead_words(c, records, shared, tie, why).endswith("Mirror-SD did not beat SD: its draft is too slow.")
    lost = _rounds_at(records, [{"ar": 10, "sd": 13, "mirror": 11}, {"ar": 9, "sd": 12, "mirror": 10},
                                {"ar": 10, "sd": 13, "mirror": 11}])
    assert lead_words(c, records, shared, lost).endswith("Mirror-SD was slower than SD, in all 3 rounds.")
    won = _rounds_at(records, [{"ar": 10, "sd": 13, "mirror": 15}, {"ar": 9, "sd": 12, "mirror": 14},
                               {"ar": 10, "sd": 13, "mirror": 15}])
    hid = c["mirror"].draft_hidden_s  # how it won, the card's figure: the drafting hidden beside the target
    assert lead_words(c, records, {"target_device": "cuda:0", "draft_device": "cuda:1"}, won, why).endswith(
        f"Mirror-SD beat SD: {label('mirror')} {15 / 13:.2f}× SD's speed."  # no "why" where it won
        + (f" Its draft hid {hid:.1f} s of drafting beside the target." if hid and hid >= 0.05 else ""))
    from dataclasses import replace as dc_replace
    hidden = dict(c, mirror=dc_replace(c["mirror"], draft_hidden_s=1.23))
    assert lead_words(hidden, records, shared, won).endswith(
        f"{15 / 13:.2f}× SD's speed. Its draft hid 1.2 s of drafting beside the target.")
    # a higher median the rounds cannot tell from SD's: a tie, with its figure, and no cause claimed
    above = _rounds_at(records, [{"ar": 10, "sd": 13, "mirror": 13.5}, {"ar": 9, "sd": 12, "mirror": 11.5},
                                 {"ar": 10, "sd": 13.1, "mirror": 13.2}])
    assert lead_words(c, records, shared, above, why).endswith(
        f"Mirror-SD and SD tie: {label('mirror')} ran {13.2 / 13:.2f}× SD's speed (medians), but not faster in every "
        f"round, so these 3 runs cannot tell the two apart.")
    # from one run, a gap under ONE_RUN is not called either way; a wider one is, as one run's
    from ui.figures import ONE_RUN, speeds
    sp = speeds(c)
    ratio = sp["mirror"][0] / sp["sd"][0]
    one = lead_words(c, records, shared, None, why)
    if abs(ratio - 1) < ONE_RUN:
        assert f"In this one run {label('mirror')} ran {ratio:.2f}× SD's speed" in one, one
        assert (f"within one run's noise here ({ONE_RUN:.0%})." + (" Its draft is too slow." if ratio < 1 else "")) in one, one
    else:
        assert one.endswith(f"SD in this one run: {label('mirror')} {ratio:.2f}× SD's speed."
                            + (" Its draft is too slow." if ratio < 1 else "")), one
    noise = _rounds_at(records, [{"ar": 10, "sd": 11, "mirror": 9}, {"ar": 12, "sd": 11, "mirror": 9.5},
                                 {"ar": 10, "sd": 10.5, "mirror": 9}])  # SD ahead of AR in 2 of 3 rounds
    assert lead_words(c, records, shared, noise).startswith(
        "No method was clearly faster than plain decoding (AR) here.")
    # the measured cost that decides it, where drafting did not pay: one draft forward against one target forward
    assert lead_words(c, records, shared, noise, cost=0.7).startswith(
        "No method was clearly faster than plain decoding (AR) here. Each drafted token cost 70% of a target "
        "forward on this machine (SD's median).")
    slow = _rounds_at(records, [{"ar": 10, "sd": 8, "mirror": 7}, {"ar": 11, "sd": 9, "mirror": 8},
                                {"ar": 10, "sd": 8, "mirror": 7}])
    assert lead_words(c, records, shared, slow).startswith("Plain decoding (AR) was the fastest here")
    assert lead_words({"ar": c["ar"]}, records, shared, None) == ""


def test_the_lead_s_why_is_the_ledger_s_biggest_gap_then_the_projection_where_it_passes_sd(monkeypatch):
    """Why Mirror-SD did not beat SD, in the ledger's own terms: the part of a token's time that
    grew most against SD, with both figures as the ledger shows them, and (verifying) what hiding
    the draft did to the waiting; then, only where the draft on a device of its own would pass SD
    in every round and both models share one device, that projection, labelled; nothing where
    Mirror-SD was the faster."""
    import ui.results as results
    from ui.results import _ms, lead_why, ledger_cause, ledger_terms, render_ledger
    records = tiny_records()
    shared = {"target_device": "cpu", "draft_device": "cpu", "target_layers": 4}
    passes = {"over_sd": {"b": 1.5, "c": 1.2}, "over_sd_rounds": {"b": [1.2, 1.5, 1.7]}}
    c = cards(records)
    slower = {m: {"e2e_tps": Spread(x.e2e_tps, 0, 0, 3)} for m, x in c.items()}
    slower["mirror"] = {"e2e_tps": Spread(c["sd"].e2e_tps * 0.8, 0, 0, 3)}
    # the real runs: the why names the ledger's own figures for whichever part grew most
    sd, mi = ledger_terms(records["sd"]), ledger_terms(records["mirror"])
    cause = ledger_cause(records, shared)
    if mi["step"]["per_token"] > sd["step"]["per_token"]:
        grew = max(("forwards", "waiting", "idle"), key=lambda k: mi[k] - sd[k])
        assert cause.startswith("Why: ") and f"{_ms(mi[grew])}" in cause and f"{_ms(sd[grew])}" in cause, cause
        row = re.search(r'<li data-ledger="mirror">(.*?)</li>', render_ledger(records)).group(1)
        assert f"{_ms(mi[grew])}" in row, row  # the figure the why names is the ledger's
    else:
        assert cause == ""
    said = lead_why(records, shared, passes, slower)
    assert said.startswith(cause) and said.endswith(
        "With the draft on a device of its own these steps would give 1.50× SD (projected, not measured)."), said
    for p in (dict(passes, over_sd_rounds={"b": [0.8, 1.5, 1.7]}), {"over_sd": {"b": 0.9}}, None):
        assert lead_why(records, shared, p, slower) == cause  # inconclusive, below SD, or none: no projection
    two = dict(shared, target_device="cuda:0", draft_device="cuda:1")
    assert "projected" not in lead_why(records, two, passes, slower)
    faster = dict(slower, mirror={"e2e_tps": Spread(c["sd"].e2e_tps * 3, 0, 0, 3)})
    assert lead_why(records, shared, passes, faster) == ""

    # each cause, from set ledger terms (ms a token)
    def terms(forwards, waiting, idle):
        return {"forwards": forwards, "waiting": waiting, "idle": idle, "hidden": 0.0,
                "step": {"per_token": forwards + waiting + idle}}
    def cause_of(sd_t, mirror_t, meta=shared):
        monkeypatch.setattr(results, "ledger_terms", lambda rec: sd_t if rec is records["sd"] else mirror_t)
        return ledger_cause(records, meta)
    assert cause_of(terms(40, 30, 1), terms(70, 29, 1)) == (
        "Why: verifying cost Mirror-SD 70 ms a token against SD's 40, its target working beside the draft on the "
        "same cores; hiding its draft saved no waiting (29 against SD's 30 ms a token).")
    assert cause_of(terms(40, 30, 1), terms(70, 14, 1), two) == (
        "Why: verifying cost Mirror-SD 70 ms a token against SD's 40; hiding its draft saved 16 ms a token of waiting.")
    assert cause_of(terms(40, 30, 1), terms(42, 60, 1)) == (
        "Why: its target waited for the draft 60 ms a token against SD's 30: the draft was too slow to hide "
        "behind the target.")
    assert cause_of(terms(40, 30, 1), terms(40, 30, 9)) == "Why: idle time cost Mirror-SD 9.0 ms a token against SD's 1.0."
    assert cause_of(terms(40, 30, 1), terms(30, 30, 1)) == ""  # not slower a token: no why
    monkeypatch.undo()
    html = render_verdict(records, shared, None, slower)
    if cause:
        assert f'<p class="msd-lead-why">{html_escape(cause)}</p>' in html
        assert html.index("msd-lead") < html.index("msd-lead-why") < html.index("msd-ledger")


def test_the_done_message_says_where_and_how_often_not_the_verdict():
    """The status after a run says the machine, how many interleaved runs, whether every method
    wrote AR's tokens, and points to the result; no ratio and no projection (the verdict under
    the race says those, once)."""
    from ui.figures import machine_words
    from ui.frames import done_message
    records = tiny_records()
    meta = {"target_device": "cpu", "draft_device": "cpu"}
    rounds = [cards(records) for _ in range(3)]
    said = done_message(records, meta, rounds)
    assert said.startswith(f"Done, measured on {machine_words(meta)} (3 interleaved runs of each method). "), said
    assert said.endswith("The result is under the race."), said
    assert "× AR" not in said and "× SD" not in said and "Projected" not in said, said
    assert "(one run of each method)" in done_message(records, meta, None)


def test_the_takeaway_says_how_late_the_branch_hits_came_from_the_run_s_own_steps():
    """Where a Mirror-SD run's branches matched verdicts but the draft finished them after the
    verdict, the takeaway counts them and gives the median wait, beside a fresh window's time
    (zoom.redraft_ms), from that run's own steps; a run without a late hit, or no run, says nothing."""
    from dataclasses import replace
    from statistics import median

    from mirror_sd.engine.events import Span
    from ui.results import late_hits_words
    from ui.runs import RunRecord, analyse, verdict_outcome
    from ui.zoom import redraft_ms
    rec = tiny_records()["mirror"]
    hit = min(s for s, sv in analyse(rec).steps.items() if verdict_outcome(sv) == "hit")
    verdict = max(e.end_ns for e in rec.spans if e.step == hit and e.label in ("suffix", "accept"))
    last = max(i for i, e in enumerate(rec.events) if isinstance(e, Span) and e.step == hit and e.label == "branches")
    events = list(rec.events)
    events[last] = replace(events[last], end_ns=verdict + 50 * 10**6)
    late = RunRecord("mirror", events, list(rec.times_ns), rec.t0_ns, rec.token_texts, rec.id_texts)
    steps = analyse(late).steps
    hits = [sv for sv in steps.values() if verdict_outcome(sv) == "hit"]
    waits = [sv.late_ms for sv in hits if sv.late_ms]
    assert 50 in waits
    said = late_hits_words(late)
    which = (("that branch" if len(hits) == 1 else f"all {len(hits)} of those branches") if len(waits) == len(hits)
             else f"{len(waits)} of those branches")  # every hit late: "all", not "9 of those 9"
    assert said.startswith(f" Its branches hit {len(hits)} verdict") and (
        f"finished {which} after the verdict, a median {median(waits):.0f} ms late") in said, said
    fresh, n = redraft_ms(late), sum(1 for sv in steps.values() if sv.fallback is not None
                                     or verdict_outcome(sv) == "turn")
    assert ("a window drafted fresh after a verdict took" in said) == (fresh is not None and n >= 3)
    if fresh is not None and n >= 3:
        assert f"a window drafted fresh after a verdict took {fresh:.0f} ms (median)" in said
    assert late_hits_words(tiny_records()["sd"]) == "" and late_hits_words(None) == ""


def test_the_hit_rate_line_is_left_out_where_the_runs_projections_straddle_one():
    """The What-if hit-rate line (the runs shown's curve) may say Mirror-SD passes SD; where the
    runs' own projections of that pair fall on both sides of 1×, the line above says they cannot
    tell, and the curve's line is left out, so no "passes" stands beside that "cannot say"."""
    from mirror_sd.models.tiny import LAYERS
    from ui.whatif import best_projection, over_sd_of, projection_line
    records = tiny_records()
    base = {"settings": {"gamma": 4, "kappa": 8, "branch_budget": 2},
            "meta": {"target_layers": LAYERS, "exit_layer": LAYERS // 2}}
    own = over_sd_of(dict(base, records=records))
    for rounds, doubt in (([0.9, 1.1, 1.0], True), ([1.1, 1.2, 1.3], False)):
        projected = [{"b": own["b"], "c": c} for c in rounds]
        p = best_projection(dict(base, records=records, projected=projected))
        line = projection_line(p)
        series = re.search(r'msd-hit-series"><span class="msd-proj-tag">projection</span> (.*?)</p>', line)
        assert (series is None) == doubt, line  # the tiny pair's projection has its hit-rate line
        assert ("on both sides of 1×, so these runs cannot say" in line) == doubt, line


def _counted(turns: int, steps: int, short: bool = False) -> str:
    """How the page counts a gated run's steps in turn: every step but the last (which has no
    next window to draft) reads as all of them, so "11 of 12" never suggests one overlapped."""
    if turns == steps - 1:
        return f"all {turns} drafting steps" if short else f"all {turns} of its steps that drafted a next window"
    return f"{turns} of {steps} steps" if short else f"{turns} of its {steps} steps"


def test_the_seconds_split_says_when_the_runs_cannot_tell_mirror_sd_from_sd():
    """The seconds chart splits a gap into parts; where the interleaved runs cannot tell the
    Mirror-SD from SD (their ranges overlap) its line says the parts are not a proven cause, and
    where every SD run was faster, not."""
    from ui.results import takeaway
    records = tiny_records()

    def spreads(mirror_low: float) -> dict:
        rounds = [cards(records) for _ in range(3)]
        for r, (sd, mirror) in zip(rounds, ((10.0, mirror_low), (10.5, 9.0), (11.0, 9.2))):
            r["ar"].e2e_tps, r["sd"].e2e_tps, r["mirror"].e2e_tps = 5.0, sd, mirror
        return repeat_summary(rounds)

    doubt = "These 3 runs cannot tell Mirror-SD from SD: the parts show where the runs shown spent their time"
    said = takeaway(records, spreads(10.2))  # one Mirror-SD run faster than SD's slowest
    assert "the chart below splits" in said and doubt in said, said
    assert doubt not in takeaway(records, spreads(8.0))  # every SD run faster than every Mirror-SD run


def test_a_method_with_a_higher_median_ties_whenever_a_lower_one_does():
    """Over interleaved runs, a method whose range overlaps the winner's ties with it; a method
    with a higher median than a tied one ties too, though its own range is narrow, so no tile says
    "slower than the fastest" beside a slower tile that ties, and the headline never names the
    slower one alone."""
    from ui.results import standing
    records = dict(tiny_records())
    records["mirror-gated"] = records["mirror"]
    c = cards(records)
    rounds = [cards(records) for _ in range(3)]
    for r, (sd, gated, overlapped) in zip(rounds, ((12.5, 11.9, 9.0), (12.4, 11.8, 11.7), (12.6, 12.0, 12.6))):
        r["ar"].e2e_tps, r["sd"].e2e_tps, r["mirror"].e2e_tps, r["mirror-gated"].e2e_tps = 10.0, sd, gated, overlapped
    spreads = repeat_summary(rounds)
    # the overlapped run's wide range reaches SD's; the gated one's narrow range stays under it
    assert spreads["mirror-gated"]["e2e_tps"].high >= spreads["sd"]["e2e_tps"].low > spreads["mirror"]["e2e_tps"].high
    level = level_with(c, "sd", spreads)
    assert set(level) == {"sd", "mirror", "mirror-gated"}, level
    badges = {m: text for m, (text, _) in standing(c, spreads).items()}
    assert badges["mirror"] == badges["mirror-gated"] == "within noise of SD", badges
    hover = {m: tip for m, (_, tip) in standing(c, spreads).items()}
    # each tie says why: the rounds the winner won, or the median above a tied one's
    assert "(SD was faster than Mirror-SD (gated) in 2 of the 3 rounds)" in hover["mirror-gated"]
    assert "(Mirror-SD's median is above Mirror-SD (gated)'s)" in hover["mirror"]
    assert badges["ar"] == "baseline" and "clearly slower than SD" in hover["ar"]
    board = _scoreboard_text(c, spreads)
    assert "slower than SD in 2 of 3 rounds" in board and "slower than SD in all 3 rounds " in board, board
    for r, gated in zip(rounds, (12.3, 12.2, 12.4)):  # slower in every round, its median within 3% of SD's: a tie
        r["mirror"].e2e_tps = gated
    near = repeat_summary(rounds)
    assert "mirror" in level_with(c, "sd", near)
    assert "slower than SD in all 3 rounds, by under 3% (medians)" in _scoreboard_text(c, near)


def _scoreboard_text(c, spreads) -> str:
    from ui.results import _scoreboard
    return re.sub(r"<[^>]+>", " ", _scoreboard(c, spreads))


def test_the_baseline_is_never_badged_a_tie_and_a_paired_round_decides():
    """AR's tile says "baseline" even where the runs cannot tell the winner from it; a method
    faster than AR in every round by more than one run's noise is told from it though a slow round
    widens AR's range past it (each round's methods ran back to back, so a slow round slows all)."""
    from ui.results import standing
    records = dict(tiny_records())
    c = cards(records)
    rounds = [cards(records) for _ in range(3)]
    for r, (ar, sd, gated) in zip(rounds, ((10.0, 12.0, 10.5), (14.0, 15.0, 13.5), (10.5, 12.5, 10.4))):
        r["ar"].e2e_tps, r["sd"].e2e_tps, r["mirror"].e2e_tps = ar, sd, gated
    spreads = repeat_summary(rounds)
    assert spreads["ar"]["e2e_tps"].high > spreads["sd"]["e2e_tps"].low  # the ranges overlap
    assert level_with(c, "sd", spreads) == []  # but SD beat each in every round, by over 3%
    text = verdict(c, records, {}, spreads)
    assert text.startswith("SD won end to end"), text
    for r in rounds:  # AR now as fast as SD in one round: no winner, and AR's tile still "baseline"
        r["ar"].e2e_tps = r["sd"].e2e_tps if r is rounds[1] else r["ar"].e2e_tps
    spreads = repeat_summary(rounds)
    badges = standing(c, spreads)
    assert "ar" in level_with(c, "sd", spreads)
    assert badges["ar"][0] == "baseline", badges
    assert "the runs cannot tell SD from it (SD was faster than AR in 2 of the 3 rounds)" in badges["ar"][1]


def test_the_cause_under_the_tiles_draws_the_zoomed_step_s_rule_with_its_figures():
    """Under the verdict's tiles, the cause in one step: the zoomed step's target time after the
    early exit and the draft's time to the branch the verdict took, as bars on one scale and in
    words whose figures add up (need = target's time + wait), the same as the zoom's rule."""
    from ui.results import render_verdict
    from ui.zoom import render_cause, render_zoom, rule_figures, zoom_record, zoom_step
    records = tiny_records()
    meta = {"target_layers": 4}
    rec = zoom_record(records)
    f = rule_figures(rec, zoom_step(rec), meta)
    assert f is not None and not f["fits"] and f["wait"] > 0  # the tiny pair's typical hit is late
    assert f["need"] == round(f["have"]) + f["wait"]
    cause = render_cause(rec, meta)
    words = re.sub(r"<[^>]+>", " ", cause)
    # the target's part in two, its layers' time the inspector's and How it works' figure
    suffix = sum(s.end_ns - s.start_ns for s in rec.spans if s.step == zoom_step(rec) and s.label == "suffix") / 1e6
    assert f["layers_ms"] == pytest.approx(suffix) and f["layers_ms"] <= f["have"]
    part = f" (layers {suffix:.0f} ms, then its verdict)" if round(suffix) < round(f["have"]) else ""
    assert (f"After the early exit the target needed {f['have']:.0f} ms more{part}. The draft, on the same cores, "
            f"had the right branch ready only after {f['need']:.0f} ms. The target waited {f['wait']} ms."
            ) in words, words
    # the bars on one scale: the draft's is the longest, the target's its share, the wait after it
    widths = [float(w) for w in re.findall(r'class="c-(?:target|draft)" style="width:([\d.]+)%', cause)]
    assert widths == [round(100 * f["have"] / f["need"], 1), 100.0], widths
    assert f'<i class="c-wait" style="left:{100 * f["have"] / f["need"]:.1f}%' in cause
    zoom = render_zoom(rec, meta)
    assert f"was ready <b>{f['need']:.0f} ms</b> after the exit" in zoom  # the zoom's rule: the same figures
    html = render_verdict(records, meta)
    assert cause in html
    # one sentence, then the cause, then the figures; the takeaway one click away, closed
    order = [html.index(x) for x in ('class="msd-lead"', 'class="msd-cause"', 'class="msd-verdict-text"',
                                     'class="msd-scoreboard"', '<details class="msd-more">', 'class="msd-takeaway"')]
    assert order == sorted(order), order
    assert render_cause(records["sd"], meta) == ""  # no early exit: no such step


def test_a_single_run_s_verdict_is_labelled_one_timing_and_says_where_the_medians_are():
    """The presenter view (one run per method): under the lead, a tag and a line say the figures
    are one timing each and how to get medians; over interleaved runs, no such line."""
    from ui.results import render_verdict
    records = tiny_records()
    one = render_verdict(records, {})
    assert '<span class="msd-proj-tag">one run</span> One timing of each method, an anecdote' in one
    assert one.index("msd-lead") < one.index("msd-one-run")
    c = cards(records)
    spreads = {m: {"e2e_tps": Spread(x.e2e_tps, x.e2e_tps * .9, x.e2e_tps * 1.1, 3)} for m, x in c.items()}
    assert "msd-one-run" not in render_verdict(records, {}, None, spreads)


def test_the_time_per_token_ledger_adds_up_to_each_run_s_decode_speed():
    """Each method's sum (a step's forward, the wait for the draft, idle, over the tokens a step
    wrote) is its run's decode time per token, the inverse of the decode speed the cards give;
    AR's step is one token; the drafting methods name their tokens a step."""
    from ui.results import _ms, render_ledger
    from ui.runs import measured
    from ui.why import per_token
    records = tiny_records()
    for m, rec in records.items():
        t = per_token(rec)
        assert t["per_token"] == pytest.approx(1e3 / measured(rec)["decode_tokens_per_s"], rel=1e-6), m
        step = t["forwards"] + t["waiting"] + t["idle"]
        assert step / t["tokens_per_step"] == pytest.approx(t["per_token"], rel=1e-9)
    assert per_token(records["ar"])["tokens_per_step"] == 1.0
    html = render_ledger(records)
    top = max(per_token(rec)["per_token"] for rec in records.values())
    for m, rec in records.items():
        row = re.search(rf'<li data-ledger="{m}">(.*?)</li>', html).group(1)
        t = per_token(rec)
        assert f"= <b>{_ms(t['per_token'])} ms a token</b>" in row, row
        # the bar's parts, on one scale, add up to the run's share of the slowest token
        widths = [float(w) for w in re.findall(r'style="width:([\d.]+)%"', row)]
        assert sum(widths) == pytest.approx(100 * t["per_token"] / top, abs=0.2), (m, widths)
    assert "a step after the first: " in re.search(r'<li data-ledger="sd">(.*?)</li>', html).group(1)
    assert "this run" in html and render_ledger({"ar": records["ar"]}) == ""


def test_statistics_gives_mirror_sd_s_two_lanes_once():
    """The lanes' line above the costs gives how Mirror-SD's two lanes shared the cores; the
    costs' list under it does not say it again."""
    records = tiny_records()
    stats = records["mirror"].finish.stats
    before = stats.get("lane_split")
    stats["lane_split"] = "2 cores; target 1 thread and draft 1 while both work"
    try:
        text = re.sub(r"<[^>]+>", "", render_statistics(records, {}, {}))
    finally:  # the cached records as they were
        stats.pop("lane_split")
        if before is not None:
            stats["lane_split"] = before
    assert text.count("two lanes") == 1 and text.count("target 1 thread and draft 1") == 1, text
