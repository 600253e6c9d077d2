"""Cross-tokenizer pairs in the app. Test mode (build_demo(tiny=True)) gives the tiny cross
pair of mirror_sd.models.tiny (cross_pair, "twin") for a bundled draft with another
tokenizer, so the cross preset works without models: the pair check (its sentences, the
draft's prompt, warnings), shown before a run (Check pair, the preset) and after one; a pair
that shares almost nothing is one message, never a traceback; the summary's sentence on the
shared tokens; the run matches AR. Then the cross preset in a real browser."""
from __future__ import annotations

import json
import os
import re
import socket
from html import escape

import gradio as gr
import pytest
import torch

from mirror_sd.models.tiny import cross_pair, tiny_pair
from ui.frames import pair_spec
from ui.handlers import Handlers
from ui.pairbox import PairBox
from ui.state import AppState
from ui.paircheck import SAME_TOKENIZER, compute_check, render_pair_check
from ui.session import PairCache

CROSS_PRESET = "Cross-tokenizer: Qwen2.5-Coder 1.5B + Gemma 3 270M (bundled, offline)"
CROSS = ("default", "gemma-3-270m", "int8", "auto", "auto", "same")  # the pair fields, in order
PROMPT = "def add(a, b):"


def refusing_pair(spec, progress):
    """A draft whose word vocabulary shares nothing with the tiny target's."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from mirror_sd.models import tiny
    from mirror_sd.models.pair import ModelPair
    words = ["<unk>"] + [f"zz{i}" for i in range(60)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    base = tiny_pair()
    draft = tiny.build(tiny.qwen_config(vocab_size=len(words)), 3, "qwen", torch.float32)
    return ModelPair(base.target, draft, base.tokenizer, target_name="tiny-target",
                     draft_name="zz-draft",
                     draft_tokenizer=PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>"))


def test_the_cross_preset_follows_the_default_one():
    from ui.layout import PAIR_PRESETS
    names = list(PAIR_PRESETS)
    assert names[1] == CROSS_PRESET and PAIR_PRESETS[CROSS_PRESET] == ("default", "gemma-3-270m")


def test_pair_check_of_a_cross_pair_names_shares_coverage_prompt_and_warnings():
    pair = cross_pair(0, "foreign", dtype=torch.float32)
    pair.info = {"warnings": ["the draft is slow here"]}
    check = compute_check(pair)
    html = render_pair_check(check)
    b = pair.bridge
    assert check["cross"] and check["shared_tokens"] == b.n_shared and 0 < check["shared_share"] < 1
    assert "cross-tokenizer" in html and f"{b.n_shared:,} tokens are spelled the same" in html
    assert escape(f"({b.shared_share:.0%} of the target's {b.target_tokens:,})") in html
    assert escape(f"They cover {check['coverage']:.0%} of the target's own greedy output") in html
    assert "the draft reads" in html
    assert "<details" in html and escape(check["draft_prompt_text"][:30]) in html
    assert "The draft is slow here" in html  # pair.info's warnings, as sentences
    json.dumps(check)  # plain data: it goes into traces and across processes


def test_pair_check_of_a_same_tokenizer_pair_is_one_line_and_its_warnings():
    check = compute_check(tiny_pair())  # the draft is a noisy copy: not smaller than the target
    html = render_pair_check(check)
    assert not check["cross"] and check["lines"] == [] and SAME_TOKENIZER in html
    assert "<details" not in html and "shared" not in html
    assert len(check["warnings"]) == 1 and "not smaller than the target" in html


def test_check_pair_loads_and_checks_without_a_run_once_per_pair(monkeypatch):
    pairs = PairCache.tiny()
    pairbox = PairBox(AppState(pairs=pairs))
    assert "not loaded yet" in pairbox.show(*CROSS)
    status, box = list(pairbox.check(*CROSS))[-1]
    assert "Loaded and checked" in status
    assert "cross-tokenizer" in box and "tokens are spelled the same" in box
    loaded = pairs.peek(pair_spec(*CROSS))
    first = loaded.check
    assert pairbox.show(*CROSS) == box and pairbox.poll(*CROSS)[0] == box
    list(pairbox.preset_check(*CROSS))  # already loaded: shown, not checked again
    assert pairs.peek(pair_spec(*CROSS)).check is first
    same = ("default", "default", "int8", "auto", "auto", "same")
    _, box, _ = list(pairbox.preset_check(*same))[-1]  # test mode: a preset loads at once
    assert SAME_TOKENIZER in box



def test_a_chosen_preset_checks_its_own_pair_whatever_the_fields_still_say(monkeypatch):
    """The check chained after a preset reads the preset, not the two fields it has just set (a
    chained event can read their old values); a loaded but unchecked pair is named as such."""
    from ui.layout import PAIR_PRESETS, box_preset_check
    pairs = PairCache.tiny()
    pairbox = PairBox(AppState(pairs=pairs))
    _preset_check = box_preset_check(pairbox)
    _, box, _ = list(_preset_check(CROSS_PRESET, "default", "default", *CROSS[2:]))[-1]
    assert "tokens are spelled the same" in box  # the cross pair, though the fields said default
    same = ("default", "default") + CROSS[2:]
    pairs.get(pair_spec(*same), lambda *a: None)  # loaded by something else, no check
    assert "loaded, not checked yet" in pairbox.show(*same)
    default_name = next(n for n, (t, d) in PAIR_PRESETS.items() if (t, d) == ("default", "default"))
    _, box, _ = list(_preset_check(default_name, *CROSS))[-1]
    assert SAME_TOKENIZER in box and pairs.peek(pair_spec(*same)).check is not None

def test_a_pair_that_shares_almost_nothing_is_one_message_in_the_status_and_the_box(monkeypatch):
    app = AppState(pairs=PairCache(loader=refusing_pair, is_tiny=True))
    pairbox, handlers = PairBox(app), Handlers(app)
    status, box = list(pairbox.check(*CROSS))[-1]
    assert "share only 0 of" in status and "(0.0%)" in status and "l-error" in status
    assert "could not be loaded" in box and "share only 0 of" in box
    app.load_errors.clear()
    frames = list(handlers.run(prompt=PROMPT, target=CROSS[0], draft=CROSS[1], precision="int8",
                               kappa=4, max_new_tokens=8, use_cache=False))
    assert "share only 0 of" in frames[-1][0] and "Traceback" not in str(frames[-1])
    assert "could not be loaded" in pairbox.after_run(None, *CROSS)[0]


def test_a_hub_preset_waits_for_check_pair_and_zerogpu_shows_the_check_of_the_last_run(monkeypatch):
    from ui import zerogpu

    def no_load(spec, progress):
        raise AssertionError("a hub preset must not load by itself")
    pairbox = PairBox(AppState(pairs=PairCache(loader=no_load)))
    hub = ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", "int8", "auto", "auto", "same")
    frames = list(pairbox.preset_check(*hub))
    assert len(frames) == 1 and "not loaded yet" in frames[0][1] and "Check pair" in frames[0][1]
    assert frames[0][2] == gr.skip()  # the preparation's status keeps going
    monkeypatch.setattr(zerogpu, "on_zerogpu", lambda: True)
    check = compute_check(cross_pair(0, "twin", dtype=torch.float32))
    box, timer = pairbox.after_run({"meta": {"pair_check": check}}, *hub)
    assert box == render_pair_check(check)
    assert "first Run" in pairbox.show(*hub)


def test_the_background_preparation_checks_the_pair_and_shows_it_when_done(monkeypatch):
    from mirror_sd.engine.settings import Settings
    from ui.preparing import Preparer
    from ui.session import PairSpec
    pairs = PairCache.tiny()
    prep = Preparer(pairs, PairSpec(draft="gemma-3-270m"), PROMPT, Settings(max_new_tokens=4))
    handlers = Handlers(AppState(pairs=pairs, preparer=prep))
    prep.start()
    assert prep.done.wait(600) and prep.error is None
    check = pairs.peek(PairSpec(draft="gemma-3-270m")).check
    assert check is not None and check["cross"]
    status, _, box = handlers.preparing_status()
    assert "Ready" in status and box == render_pair_check(check)


def test_the_summary_says_the_draft_proposes_only_shared_tokens_and_the_ar_share():
    from ui.results import render_statistics
    from ui_records import tiny_records
    meta = {"cross": {"shared_tokens": 1234, "target_tokens": 2000, "shared_share": 0.617,
                      "ar_tokens": 24, "ar_coverage": 0.875}}
    html = render_statistics(tiny_records(), {"temperature": 0.0}, meta)
    assert "the draft proposes only the 1,234 tokens both vocabularies spell the same" in html
    assert "(62% of the target&#x27;s 2,000)" in html and "88% of this run&#x27;s AR output (24 tokens)" in html
    assert "proposes only" not in render_statistics(tiny_records(), {"temperature": 0.0}, {})


# ----------------------------------------------------------------------------- the app

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app():
    from ui.layout import build_demo, launch
    demo = build_demo(tiny=True)
    port = free_port()
    launch(demo, prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    return demo, f"http://127.0.0.1:{port}/"


def test_a_cross_pair_run_matches_ar_and_says_what_the_draft_could_propose():
    from gradio_client import Client
    demo, url = start_app()
    try:
        job = Client(url, verbose=False).submit(api_name="/run", prompt=PROMPT, target="default",
                                                draft="gemma-3-270m", max_new_tokens=24, use_cache=False)
        list(job)
        final = job.outputs()[-1]
        from ui.frames import RESULT_OUTPUTS, method_names
        at = 1 + len(method_names())  # the results come after the status and every pane
        status, cards, summary = final[0], final[at + RESULT_OUTPUTS.index("cards")], final[at + RESULT_OUTPUTS.index("statistics")]
        trace = json.load(open(final[-1]))
    finally:
        demo.close()
    assert "Done" in status
    assert cards.count("identical to the baseline") == 2  # SD and Mirror-SD
    runs = trace["runs"]
    assert {m: len(r["events"]) > 0 for m, r in runs.items()} == {"ar": True, "sd": True, "mirror": True}
    cross = trace["pair"]["cross"]
    assert cross["ar_tokens"] == 24 and 0 < cross["ar_coverage"] <= 1
    assert f"{cross['ar_coverage']:.0%} of this run&#x27;s AR output" in summary
    check = trace["pair"]["pair_check"]
    assert check["cross"] and check["target"] == "tiny-target (twin)"


# ----------------------------------------------------------------------------- in a browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed")
def test_the_cross_preset_in_the_browser_checks_the_pair_before_run(tmp_path):
    """Choosing the cross preset loads and checks the pair (test mode: the tiny cross pair)
    before any Run; the run then matches AR token for token."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from ui.layout import PAIR_PRESETS
    demo, url = start_app()
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_selector("#run-btn", timeout=60_000)
            page.wait_for_function("() => (document.querySelector('#pair-check')?.innerText || '')"
                                   ".includes('not loaded yet')", timeout=30_000)
            page.get_by_text("Model pair and devices").first.click()
            page.locator("#pair-preset input").click()
            page.get_by_role("option", name=CROSS_PRESET).click()
            page.wait_for_function("() => (document.querySelector('#pair-check')?.innerText || '')"
                                   ".includes('tokens are spelled the same')", timeout=60_000)
            box = page.inner_text("#pair-check")
            assert "cross-tokenizer" in box and "own greedy output" in box and "the draft reads" in box
            assert not page.locator("#verdict").is_visible()  # no run yet: no results shown
            assert page.input_value("#draft-model textarea, #draft-model input") == "gemma-3-270m"
            page.locator("#pair-check details summary").click()
            assert page.locator("#pair-check details pre").inner_text().strip()
            page.locator("#pair-check").screenshot(path=str(tmp_path / "pair-check.png"))
            page.click("#run-btn")
            page.wait_for_selector('#pane-mirror .msd-pane:is([data-state="done"], [data-state="error"])',
                                   timeout=180_000)
            page.get_by_text("Statistics: every figure").first.click()
            page.wait_for_function("() => (document.querySelector('#statistics')?.innerText || '')"
                                   ".includes('proposes only')", timeout=30_000)
            cards = page.inner_text("#cards")
            assert cards.count("identical to the baseline") == 2, cards  # SD and Mirror-SD
            assert "tokens are spelled the same" in page.inner_text("#pair-check")
            page.locator("#pair-preset input").click()  # back to the default pair: one line
            page.get_by_role("option", name=next(iter(PAIR_PRESETS))).click()
            # the cross pair is dropped (one pair loaded at a time) and the default one built and
            # checked: seconds when idle, longer on a busy machine
            try:
                page.wait_for_function("() => (document.querySelector('#pair-check')?.innerText || '')"
                                       ".includes('share one tokenizer')", timeout=180_000)
            except Exception:
                raise AssertionError(f"after switching back the pair check says "
                                     f"{page.inner_text('#pair-check')!r}, the status "
                                     f"{page.inner_text('#status')!r}") from None
            assert not errors, errors
            browser.close()
    finally:
        demo.close()


def test_pair_check_names_a_bundled_pair_by_its_models_own_names():
    """The box shows each model's own name and precision; the cache folder's name only on hover."""
    check = {"target": "default target (qwen2.5-coder-1.5b-instruct-q4_k_m-int8)",
             "draft": "qwen2.5-coder-0.5b-instruct (qwen2.5-coder-0.5b-instruct-q4_k_m-int8)",
             "precision": "int8", "cross": False, "lines": [], "warnings": []}
    html = render_pair_check(check)
    assert "target <span" in html and ">Qwen2.5-Coder 1.5B Instruct (int8)</span>" in html
    assert ">Qwen2.5-Coder 0.5B Instruct (int8)</span>" in html
    shown = re.sub(r'title="[^"]*"', "", html)
    assert "q4_k_m" not in shown and 'title="default target (qwen2.5-coder-1.5b-instruct-q4_k_m-int8)"' in html
    assert ">tiny-target (fp32)<" in render_pair_check(dict(check, target="tiny-target", precision="fp32"))


def test_a_default_pair_not_loaded_yet_is_named_by_its_models_own_names():
    """Before the pair loads, the box names the bundled models, not "default + default"."""
    from ui.frames import pair_spec
    from ui.pairbox import _names
    words = _names(pair_spec("default", "default", "int8", "auto", "auto", "same"))
    assert words == "target Qwen2.5-Coder 1.5B Instruct + draft Qwen2.5-Coder 0.5B Instruct (int8)", words
    assert "target gpt2 + draft tiny" in _names(pair_spec("gpt2", "tiny", "fp32", "auto", "auto", "same"))
