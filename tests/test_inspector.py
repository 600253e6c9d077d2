"""The step inspector: numbering, labels, colours and explanations a newcomer can follow."""
from __future__ import annotations

import re
from pathlib import Path

import gradio as gr

from mirror_sd.engine.events import EarlyExit
from ui.inspector import pick, render_inspector
from ui.runs import RunRecord, analyse
from ui_records import tiny_records

CSS = (Path(__file__).resolve().parent.parent / "ui" / "style.css").read_text(encoding="utf-8")


def _rule(selector: str) -> str:
    m = re.search(re.escape(selector) + r"\s*\{([^}]*)\}", CSS)
    assert m, selector
    return m.group(1)


def test_steps_are_numbered_from_one_and_the_first_window_is_no_miss():
    rec = tiny_records()["mirror"]
    order = sorted(analyse(rec).steps)
    html = render_inspector(rec, order[0])
    assert f"<b>Step 1</b> of {len(order)}" in html
    head = re.search(r'<div class="msd-step-head">(.*?)</div>', html).group(1)
    window = head.split("step's window</b>")[0]  # its own window, not what its verdict found for the next
    assert "a miss" not in window and "fallback" not in window and "first window" in window
    last = render_inspector(rec, order[-1])
    assert f"<b>Step {len(order)}</b> of {len(order)}" in last


def test_columns_are_labelled_in_words_and_scores_and_roots_are_explained():
    rec = tiny_records()["mirror"]
    a = analyse(rec)
    step = next(s for s in sorted(a.steps) if a.steps[s].rollouts)
    html = render_inspector(rec, step)
    assert "<th>last</th><th>+1</th>" in html
    assert "Column “last” is the last committed token" in html
    shown = re.sub(r'title="[^"]*"', "", html)  # hover titles may name the glossary's symbols
    assert not re.search("[γκτℓₙ]", shown)  # none on the page itself: plain words
    assert re.search(r'<abbr class="msd-term" title="[^"]*P\(the target keeps[^"]*">score</abbr>', html)
    assert 'class="msd-term" title="A branch' in html or ">root<" in html


def test_greedy_runs_show_the_argmax_rule_and_sampling_runs_the_ratio():
    rec = tiny_records()["mirror"]
    greedy = render_inspector(rec, 1, greedy=True)
    assert "min(1, p/q)" not in greedy
    assert "equals the target's argmax" in greedy or "not the target's argmax" in greedy
    sampled = render_inspector(rec, 1, greedy=False)
    assert "<th>min(1, p/q)</th>" in sampled


def test_colours_match_the_legend_and_small_print_is_readable():
    assert "234, 179, 8" not in _rule(".msd-chip.is-root")  # yellow means "after a miss"
    assert "dashed" in _rule(".msd-chip.is-root")
    assert "font-size: 12px" in _rule(".msd-chip small")  # early-exit percentages
    assert _rule(".msd-chip.k-correction") == _rule(".msd-tok.k-correction")
    assert _rule(".msd-chip.k-bonus") == _rule(".msd-tok.k-bonus")
    assert _rule(".msd-chip.k-accepted") == _rule(".msd-tok.k-accepted")
    html = render_inspector(tiny_records()["mirror"], 1)
    assert "is-verdict" not in html and "is-target" not in html  # no unexplained outline


def test_the_exit_lens_is_defined_on_hover_when_used():
    rec = tiny_records()["mirror"]
    events = [EarlyExit(e.step, e.layer, e.positions, e.token_ids, e.logprobs, lens=True)
              if isinstance(e, EarlyExit) else e for e in rec.events]
    lensed = RunRecord("mirror", events, rec.times_ns, rec.t0_ns, rec.token_texts, rec.id_texts)
    html = render_inspector(lensed, 1)
    assert re.search(r'<abbr class="msd-term" title="[^"]+">exit lens</abbr>', html)
    assert "exit lens" not in render_inspector(rec, 1)


def test_token_text_is_escaped():
    rec = tiny_records()["mirror"]
    evil = RunRecord("mirror", rec.events, rec.times_ns, rec.t0_ns, rec.token_texts,
                     {k: "<script>" for k in rec.id_texts})
    assert "<script>" not in render_inspector(evil, 1)


def test_pick_selects_the_run_and_step_of_a_click():
    records = tiny_records()
    state = {"records": records, "settings": {"temperature": 0.0}}
    run, slider, html = pick(state, gr.SelectData(None, {"index": 2, "value": "sd"}))
    assert run == "sd" and slider["value"] == 2
    assert "<b>Step 3</b>" in html and 'data-run="sd"' in html
    skipped = pick(state, gr.SelectData(None, {"index": 0, "value": "ar"}))
    assert all(isinstance(x, type(gr.skip())) for x in skipped)


def test_tiny_early_exit_probabilities_read_below_one_percent_not_zero():
    rec = tiny_records()["mirror"]
    events = [EarlyExit(e.step, e.layer, e.positions, e.token_ids,
                        [row[:-1] + [-9.0] for row in e.logprobs])
              if isinstance(e, EarlyExit) else e for e in rec.events]
    faint = RunRecord("mirror", events, rec.times_ns, rec.t0_ns, rec.token_texts, rec.id_texts)
    html = render_inspector(faint, 1)
    assert "<small>&lt;1%</small>" in html and "<small>0%</small>" not in html


def test_the_variant_without_the_early_exit_says_its_exit_is_off():
    """Mirror-SD (no exit): the inspector shows no exit layer, no exit guesses and no exit
    ranking, but that the exit is off and the draft's own guesses picked the branches."""
    import dataclasses
    import time

    from mirror_sd.engine.registry import METHODS
    from mirror_sd.engine.settings import Settings
    from mirror_sd.models.tiny import tiny_pair
    from ui.runs import RunRecord, analyse, variant_of
    from ui.session import TokenTexts
    from ui_records import PROMPT
    pair = tiny_pair()
    base, changes = variant_of("mirror-noexit")
    rec = RunRecord("mirror-noexit")
    texts = TokenTexts(pair, rec)
    rec.t0_ns = time.perf_counter_ns()
    settings = dataclasses.replace(Settings(max_new_tokens=16, gamma=4, kappa=4), **changes)
    for ev in METHODS[base](pair, settings).generate(pair.encode_prompt(PROMPT)):
        texts.on_event(ev)
        rec.add(ev, time.perf_counter_ns() - rec.t0_ns)
    steps = analyse(rec).steps
    step = next(s for s in sorted(steps) if steps[s].rollouts)
    text = re.sub(r"<[^>]+>", "", render_inspector(rec, step))
    assert "Early exit: off in Mirror-SD (no exit)" in text
    assert "the early exit is off in this run" in text and "once the early exit arrives" not in text
    assert "After layer" not in text and "early exit's estimate" not in text


def test_an_end_of_sequence_token_reads_end_on_the_page_not_the_tokenizers_markup():
    """The run's end token shows as "[end]" in the panes (the committed text) and in chips (its
    id's text), never as the tokenizer's markup such as "<|im_end|>"; other tokens keep the
    text the tokenizer decodes."""
    from mirror_sd.engine.events import Commit
    from ui.runs import RunRecord
    from ui.session import TokenTexts

    class Pair:
        eos_token_ids = {9}

        def decode(self, ids):
            return "".join("<|im_end|>" if i == 9 else f" w{i}" for i in ids)

    rec = RunRecord("ar")
    texts = TokenTexts(Pair(), rec)
    texts.on_event(Commit(0, [1, 2], ["plain", "plain"], ""))
    texts.on_event(Commit(1, [9], ["plain"], ""))
    assert rec.token_texts == [" w1", " w2", TokenTexts.END] and TokenTexts.END == "[end]"
    assert rec.id_texts[9] == "[end]" and rec.id_texts[2] == " w2"


def test_the_step_head_names_the_next_window_as_the_strip_cell_colours_it():
    """A step's own window comes from the step before; its cell in the strip is coloured by what
    its verdict found for the next window: the head says both, apart, and the second agrees
    with the cell."""
    from ui.steps import render_strip
    rec = tiny_records()["mirror"]
    steps = sorted(analyse(rec).steps)
    cells = dict((int(s), cls) for cls, s in re.findall(r'class="msd-step ([^"]*)"[^>]*data-step="(\d+)"',
                                                        render_strip(rec, selected=steps[0])))
    seen = set()
    for s in steps:
        head = re.search(r'<div class="msd-step-head">(.*?)</div>', render_inspector(rec, s), re.S).group(1)
        said = re.search(r"next step's window</b> \(the cell's colour\): branch (hit|miss)", head)
        kind = re.search(r"k-(\w+)", cells[s]).group(1)
        if kind in ("hit", "miss"):
            assert said and said.group(1) == kind, (s, kind, head)
            seen.add(kind)
        else:
            assert not said, (s, kind)
    assert seen, "the tiny run has a hit or a miss"
