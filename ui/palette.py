"""The page's two colour keys, kept apart so that no colour means two things.

Token colours (the text's highlight: how each token was committed) and lane colours (bars on
a time axis: which model was busy, and whether the target waited) use different hue families:
tokens green, blue, yellow, red, purple (a late hit is a hit: blue's family, its own indigo,
hatched); lanes greys (the target), pink (its early exit) and
cyan (the draft: dark while the target waits for it, light while it works beside the target).
The CSS (style.css, panes.css, live.css) uses these same values; tests/test_palette.py checks
the families and that each key gives each meaning its own colour. A third, small key colours
the seconds chart's bars (saved, lost): two hue families apart, none of the other keys' colours,
each readable against the takeaway's background.
"""
from __future__ import annotations

# token kind -> its highlight's colour (drawn translucent behind the text)
TOKENS = {"accepted": "#22c55e", "hit": "#3b82f6", "late": "#1d4ed8", "fallback": "#eab308",
          "correction": "#ef4444", "bonus": "#a855f7"}
# a kind in another kind's hue family (a late hit is a hit), told apart by its own colour and
# a hatching (the CSS's repeating-linear-gradient over its colour): kind -> that other kind
HATCHED = {"late": "hit"}

# lane meaning -> bar colour
LANES = {
    "first_token": "#cbd5e1",   # to the first token (prefill, first window)
    "ar_target": "#64748b",     # a target forward of one token (AR)
    "target": "#334155",        # the target's verify forward, its layers before the early exit
    "target_after": "#94a3b8",  # the target's layers after the early exit
    "exit": "#be185d",          # the early exit: its guesses go to the draft
    "verdict": "#0f172a",       # the acceptance rule
    "draft_waits": "#0e7490",   # the draft while the target waits for it (SD's windows, a miss)
    "draft_beside": "#22d3ee",  # the draft beside the target (Mirror-SD's branches)
    "draft_reads": "#a5f3fc",   # the draft reading its last drafted token, beside the target
    "message": "#f9a8d4",       # projected: a message between the lanes (the exit's guesses, the verdict)
    "host": "#e2e8f0",          # projected: host time per step, outside the lanes
}
DARK_TEXT = {"target_after", "draft_beside", "draft_reads", "first_token", "message", "host"}  # light bars: dark labels


def hue_family(hex_colour: str) -> str:
    """A colour's family as a reader names it: 'grey' for a low-chroma colour, else its hue's
    name (red, orange, yellow, green, cyan, blue, purple, pink)."""
    r, g, b = (int(hex_colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4))
    hi, lo = max(r, g, b), min(r, g, b)
    chroma = hi - lo
    if chroma < 0.25:
        return "grey"
    if hi == r:
        hue = 60 * (((g - b) / chroma) % 6)
    elif hi == g:
        hue = 60 * ((b - r) / chroma + 2)
    else:
        hue = 60 * ((r - g) / chroma + 4)
    for name, upto in (("red", 15), ("orange", 45), ("yellow", 70), ("green", 160), ("cyan", 200),
                       ("blue", 250), ("purple", 290), ("pink", 345), ("red", 360)):
        if hue < upto:
            return name
    return "red"

# the seconds chart (ui/splitchart.py): Mirror-SD's seconds against SD's, saved (left of its zero
# line) and lost (right of it); its own key, drawn only there, each bar's side and sign saying
# the same as its colour
SPLIT = {"saved": "#4d7c0f", "lost": "#c2410c"}
