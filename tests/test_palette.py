"""One colour, one meaning: the token colours and the lane colours (ui/palette.py) are hue
families apart, each key gives each meaning its own colour, and the page's CSS and scripts
draw with these same colours."""
from __future__ import annotations

import re
from pathlib import Path

from ui.palette import HATCHED, LANES, SPLIT, TOKENS, hue_family
from ui.timeline import GROUPS

UI = Path(__file__).resolve().parent.parent / "ui"
CSS = re.sub(r"/\*.*?\*/", "", "".join((UI / f).read_text(encoding="utf-8")
                                        for f in ("style.css", "panes.css", "live.css")), flags=re.S)


def _hex(rgb: str) -> str:
    r, g, b = (int(float(x)) for x in rgb.split(",")[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def _backgrounds(selector: str) -> set[str]:
    """Every background colour the CSS gives a rule whose selector list names `selector`."""
    out = set()
    for sel, body in re.findall(r"([^{}]+)\{([^{}]*)\}", CSS):
        if selector in [s.strip() for s in sel.split(",")]:
            for value in re.findall(r"background:\s*([^;]+);", body):
                m = re.match(r"rgba?\(([^)]*)\)", value.strip())
                out.add(_hex(m.group(1)) if m else value.strip().lower())
    return out


def test_token_colours_and_lane_colours_are_different_hue_families():
    tokens = {hue_family(c) for c in TOKENS.values()}
    lanes = {hue_family(c) for c in LANES.values()}
    own = [k for k in TOKENS if k not in HATCHED]
    assert len({hue_family(TOKENS[k]) for k in own}) == len(own)  # each token kind a family of its own
    assert not tokens & lanes, tokens & lanes


def test_a_kind_in_another_s_family_is_hatched_in_its_own_colour():
    """A late hit is a hit: drawn in the hit's family, in a colour of its own, and hatched
    wherever the CSS draws the kind (tokens, step cells, their key), so it never reads as the hit."""
    css = "".join((UI / f).read_text(encoding="utf-8") for f in ("style.css", "panes.css"))
    for kind, like in HATCHED.items():
        assert hue_family(TOKENS[kind]) == hue_family(TOKENS[like]) and TOKENS[kind] != TOKENS[like]
        rules = re.findall(rf"([^{{}}]*\.k-{kind}\b[^{{}}]*)\{{([^{{}}]*)\}}", css)
        drawn = [body for sel, body in rules if "background:" in body]
        assert len(drawn) >= 3, rules  # the token (twice: style.css, panes.css), the cell, its key
        assert all("repeating-linear-gradient" in body for body in drawn), drawn


def test_each_key_gives_each_meaning_its_own_colour():
    assert len(set(TOKENS.values())) == len(TOKENS)
    assert len(set(LANES.values())) == len(LANES)
    assert len({c for c, _ in GROUPS.values()}) == len(GROUPS)
    assert {c for c, _ in GROUPS.values()} <= set(LANES.values())


def test_the_css_draws_tokens_and_bars_in_the_palette_s_colours():
    for kind, colour in TOKENS.items():
        assert _backgrounds(f".msd-tok.k-{kind}") == {colour}, kind
    bars = {".b-verify": "target", ".b-target": "ar_target", ".b-first_token": "first_token",
            ".b-draft_exposed": "draft_waits", ".b-draft_hidden": "draft_beside",
            ".z-prefix": "target", ".z-exit": "exit", ".z-suffix": "target_after",
            ".z-accept": "verdict", ".z-extend": "draft_reads", ".z-branches": "draft_beside",
            ".z-fallback": "draft_waits", ".msd-btl-bar.n-exit_head": "exit",
            ".msd-btl-bar.n-branches": "draft_beside", ".msd-btl-bar.n-fallback": "draft_waits",
            ".msd-btl-bar.n-suffix": "target_after"}
    for selector, meaning in bars.items():
        assert LANES[meaning] in _backgrounds(selector), selector
    # no bar anywhere is drawn in a token colour's family
    lane_rules = [sel for sel, _ in re.findall(r"([^{}]+)\{([^{}]*)\}", CSS)
                  if re.search(r"\.b-(first_token|prefill|target|verify|draft_\w+)\b|\.z-|msd-btl-bar|msd-vbar", sel)]
    token_families = {hue_family(c) for c in TOKENS.values()}
    for sel in lane_rules:
        for selector in sel.split(","):
            for colour in _backgrounds(selector.strip()):
                if colour.startswith("#"):
                    assert hue_family(colour) not in token_families, (selector, colour)


def test_the_live_timeline_s_key_uses_lane_colours_only():
    js = (UI / "live.js").read_text(encoding="utf-8")
    key = js[js.index("const KEY = "):js.index("]];", js.index("const KEY = "))]  # the key's swatches
    colours = set(re.findall(r"background:(#[0-9a-f]{6})", key))
    assert colours and colours <= set(LANES.values()), colours


def test_no_rule_chains_the_class_dark_which_gradio_reads_as_its_dark_theme():
    """Gradio rewrites a selector with ".dark" in it into its dark theme's selector, so a rule
    like ".d-in.dark" never applies in the light theme: the page names such classes otherwise."""
    selectors = [s.strip() for group, _ in re.findall(r"([^{}]+)\{([^{}]*)\}", CSS) for s in group.split(",")]
    chained = [s for s in selectors if re.search(r"\S\.dark\b", s)]
    assert not chained, chained
    from ui.how import diagram
    assert " dark" not in diagram() and "on-light" in diagram()


def _luminance(hex_colour: str) -> float:
    """WCAG's relative luminance."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(int(hex_colour.lstrip("#")[i:i + 2], 16) / 255) for i in (0, 2, 4))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_the_seconds_chart_s_saved_and_lost_are_apart_and_readable_on_the_takeaway():
    """Saved and lost are two hue families (green-ish, red-ish), neither a token's, a lane's or
    a method's colour, and each bar stands out 3:1 against the takeaway's background (WCAG's
    contrast for a graphic)."""
    from ui.runs import colour, method_names
    assert hue_family(SPLIT["saved"]) == "green" and hue_family(SPLIT["lost"]) in ("red", "orange")
    others = set(TOKENS.values()) | set(LANES.values()) | {colour(m) for m in method_names()}
    assert not set(SPLIT.values()) & others
    background = re.search(r"\.msd-takeaway \{[^}]*background: (#[0-9a-f]{6})", CSS)[1]
    for meaning, bar in SPLIT.items():
        contrast = (_luminance(background) + 0.05) / (_luminance(bar) + 0.05)
        assert contrast >= 3.0, (meaning, bar, contrast)
