"""“Try it”: the arithmetic of one speculative step, with sliders (How it works).

A model, not a measurement, said so on the page. With a share `a` of drafted tokens kept (taken
as each token's chance, independent of the others), a window of `k` drafted tokens gives
(1 - a^(k+1)) / (1 - a) tokens per verify step on average (Leviathan et al., 2023: the kept run
plus the target's own token). Costs in target forwards (one AR token = 1): a draft forward `c`,
a verify pass over the window `v`. Then, per verify step:
- SD: the draft writes the window, then the target verifies it: v + k·c;
- Mirror-SD, the ideal, the draft on a device of its own and every step a hit: the draft starts
  at the early exit, a share `e` of the way through the verify pass, and the next step starts
  when both the verdict and the branch are done: max(v, e·v + k·c).
Speed over plain decoding = tokens per step / step cost. The page's script (CALC_JS) computes the
same formulas as `model` when a slider moves; the starting values are the run's own (`run_inputs`).
"""
from __future__ import annotations

import html
from statistics import median

from .figures import Card, card
from .runs import RunRecord
from .why import costs, mean_window, verify_forwards

esc = html.escape

# (name, label, low, high, step, default: the bundled pair on this machine, roughly)
SLIDERS = (
    ("a", "drafted tokens kept", 0.30, 0.99, 0.01, 0.85),
    ("k", "window: tokens drafted per step", 1, 12, 1, 4),
    ("c", "one draft forward, in target forwards", 0.02, 1.00, 0.01, 0.40),
    ("v", "one verify pass over the window, in target forwards", 1.00, 2.50, 0.05, 1.25),
    ("e", "early exit: share of the target's pass before it", 0.30, 0.95, 0.01, 0.86),
)


def model(a: float, k: int, c: float, v: float, e: float) -> dict:
    """Tokens per verify step and each method's speed over plain decoding (the module's formulas)."""
    tokens = k + 1.0 if a >= 0.9999 else (1 - a ** (k + 1)) / (1 - a)
    sd = tokens / (v + k * c)
    mirror = tokens / max(v, e * v + k * c)
    return {"tokens": tokens, "sd": sd, "mirror": mirror}


def _sd_card(records: dict[str, RunRecord]) -> Card | None:
    sd = records.get("sd")
    return card(sd) if sd is not None else None


def run_inputs(records: dict[str, RunRecord], meta: dict, sd: Card | None = None) -> tuple[dict, dict]:
    """(the sliders' starting values from the run on screen, each where it has the figure, else
    the default; what each was taken from, in words) ({} of words without a run). `sd`: SD's
    card, where the caller has it."""
    values = {name: default for name, *_, default in SLIDERS}
    said: dict[str, str] = {}
    sd = sd or _sd_card(records)
    if sd is None:
        return values, said
    stats = records["sd"].finish.stats or {}
    if stats.get("acceptance_rate"):
        values["a"] = round(min(0.99, max(0.30, stats["acceptance_rate"])), 2)
        said["a"] = "SD's kept share"
    window = mean_window(records["sd"])
    if window:
        values["k"] = int(min(12, max(1, round(window))))
        said["k"] = "SD's mean window"
    got = costs(records)
    if got.get("target") and got.get("draft"):
        values["c"] = round(min(1.0, max(0.02, got["draft"] / got["target"])), 2)
        said["c"] = "the medians measured here"
    passes = list(verify_forwards(records["sd"]).values())  # every window length, as the model's one k
    if got.get("target") and passes:
        values["v"] = round(min(2.5, max(1.0, median(passes) / got["target"])) * 20) / 20
        said["v"] = "SD's verify passes (median)"
    layer, layers = meta.get("exit_layer"), meta.get("target_layers")
    if layer and layers:
        values["e"] = round(min(0.95, max(0.30, layer / layers)), 2)
        said["e"] = f"layer {layer} of {layers}"
    return values, said


def _shown(name: str, value: float) -> str:
    return str(int(value)) if name == "k" else f"{value:.0%}" if name in ("a", "e") else f"{value:.2f}"


def outputs(values: dict) -> dict[str, str]:
    """The figures the page prints for `values` (the script writes the same strings)."""
    m = model(values["a"], int(values["k"]), values["c"], values["v"], values["e"])
    return {"tokens": f"{m['tokens']:.2f}", "sd": f"{m['sd']:.2f}×", "mirror": f"{m['mirror']:.2f}×",
            "gain": f"{m['mirror'] / m['sd']:.2f}×"}


def render_calc(records: dict[str, RunRecord], meta: dict, measured_sd: float | None = None,
                replay_b: float | None = None) -> str:
    """The box: a slider per input (starting at the run's own figures), the model's tokens per
    step and speeds, and, after a run, SD's measured tokens per verify step and decode speed over
    AR beside them, and (`replay_b`) the replay of the run's own steps with the draft on a device
    of its own, the page's one figure for that case, with why the model's differs."""
    sd = _sd_card(records)
    values, said = run_inputs(records, meta, sd)
    out = outputs(values)
    # the draft costs the model is drawn at, not pairs' projections (the replay is the page's figure)
    marks = [("the draft cost measured here" if "c" in said else "the sliders' start", values["c"]),
             ("a paper-like draft cost", PAPER_DRAFT)]
    per_step = (f"wrote {sd.tokens_per_step:.2f} tokens per verify step (its windows vary from step to step; the "
                f"model takes one length) and " if sd and sd.tokens_per_step else "")
    rows = "".join(
        f'<label class="mc-row"><span class="mc-name">{esc(text)}</span>'
        f'<input type="range" name="{name}" min="{low}" max="{high}" step="{step}" value="{values[name]}" '
        f'data-run="{values[name]}"><b data-show="{name}">{_shown(name, values[name])}</b>'
        f'<small>{esc(said.get(name, ""))}</small></label>'
        for name, text, low, high, step, _ in SLIDERS)
    run = (f'<p class="mc-run">Measured in the run on screen: SD {esc(per_step)}decoded at <b>{measured_sd:.2f}×</b> AR\'s speed '
           f'(the sliders start at its figures; the model leaves out the first token, the steps that drafted '
           f'nothing and the tokens SD takes from prompt lookup, at no model\'s cost, where the text repeats '
           f'itself, so it can fall short of the measured speed).</p>' if measured_sd else "")
    return (f'<div class="msd-calc"><h4>Try it: when does drafting pay? <span class="mc-tag">a model, not a '
            f'measurement</span></h4>{rows}'
            f'<p class="mc-out">Tokens per verify step: <b data-out="tokens">{out["tokens"]}</b> '
            f'(the kept run of drafted tokens, plus the target\'s own). '
            f'SD: <b data-out="sd">{out["sd"]}</b> plain decoding\'s speed (each step: the draft\'s window, '
            f'then the verify pass). Mirror-SD with the draft on a device of its own, every step a hit: '
            f'<b data-out="mirror">{out["mirror"]}</b>, <b data-out="gain">{out["gain"]}</b> SD (the draft '
            f'starts at the early exit; the next step waits for the verdict and the branch).</p>{run}{_replayed(replay_b)}'
            f'<p class="mc-note"><button type="button" class="mc-paper">a pair like the paper\'s: one draft '
            f'forward a twentieth of a target forward</button> <button type="button" class="mc-reset">back to '
            f'the run\'s figures</button><br>In this model, with the draft on a device of its own, Mirror-SD '
            f'is never behind SD; its lead is largest where the draft\'s window just fits in the part of the pass '
            f'after the early exit (the chart below), whether the draft is cheap (a 0.6B draft beside a 14–32B '
            f'target) or not. The What-if fold replays this run\'s own steps instead, each with its own window, on '
            f'an accelerator pair whose draft has a cost of its own (the pay chart gives its share of the '
            f'target\'s), so its figures differ from this model\'s.</p>{gain_chart(values, marks)}</div>')


def _replayed(replay_b: float | None) -> str:
    """One line: the page's figure for the draft on a device of its own (the replay), and why
    this model's can differ ('' without it)."""
    if replay_b is None:
        return ""
    return (f'<p class="mc-run">The page\'s figure for this pair with the draft on a device of its own is '
            f'the replay of this run\'s own steps (What if, row (b); the pay chart): Mirror-SD '
            f'<b>{replay_b:.2f}×</b> SD. This model reads otherwise: it gives both methods one window length (k '
            f'above: SD\'s mean window, rounded) and makes every step a hit; the replay keeps each method\'s own '
            f'windows (Mirror-SD\'s can be longer than SD\'s), misses and late branches as they were.</p>')


PAPER_DRAFT = 0.05  # one draft forward in target forwards for a 0.6B draft beside a 14-32B target
GAIN_C = (0.0, 0.6)  # the gain chart's draft costs, in target forwards


def gain(k: int, c: float, v: float, e: float) -> float:
    """Mirror-SD over SD in the model (the draft on a device of its own, every step a hit): the
    tokens a step cancel, leaving SD's step over Mirror-SD's, (v + k·c) / max(v, e·v + k·c)."""
    m = model(0.5, k, c, v, e)  # any kept share: the tokens a step cancel in the ratio
    return m["mirror"] / m["sd"]


def gain_chart(values: dict, marks: list[tuple[str, float]]) -> str:
    """An SVG of the model's Mirror-SD over SD against the cost of one draft forward (GAIN_C), at
    the run's window, verify pass and exit (`values`), with a dashed line at 1× (SD) and each of
    `marks` (name, draft cost) as a dot with its figure. The gain peaks at 2 - e where the draft's
    window just fits in the pass after the exit, c = (1 - e)·v / k, and falls towards 1× past it."""
    k, v, e = int(values["k"]), values["v"], values["e"]
    W, H, L, R, T, B = 560, 190, 40, 12, 12, 30
    top = max(1.2, 2 - e + 0.05)
    x = lambda c: L + (W - L - R) * (c - GAIN_C[0]) / (GAIN_C[1] - GAIN_C[0])  # noqa: E731
    y = lambda g: T + (H - T - B) * (top - g) / (top - 1.0 + 0.05)  # noqa: E731
    cs = [GAIN_C[0] + i * (GAIN_C[1] - GAIN_C[0]) / 120 for i in range(121)]
    peak = (1 - e) * v / k
    path = "M" + " L".join(f"{x(c):.1f} {y(gain(k, c, v, e)):.1f}" for c in sorted(set(cs + [peak])) if GAIN_C[0] <= c <= GAIN_C[1])
    ticks = "".join(f'<text class="gc-lab" x="{x(c):.1f}" y="{H - B + 14}" text-anchor="middle">{c:.1f}</text>'
                    for c in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6))
    gticks = "".join(f'<text class="gc-lab" x="{L - 4}" y="{y(g) + 4:.1f}" text-anchor="end">{g:.2f}×</text>'
                     for g in (1.0, round(2 - e, 2)))
    dots = ""
    for i, (name, c) in enumerate(marks):
        g = gain(k, c, v, e)
        anchor = "start" if x(c) < W - 170 else "end"
        dots += (f'<g class="gc-mark" data-c="{c:.3f}" data-gain="{g:.3f}"><line class="gc-vline" x1="{x(c):.1f}" '
                 f'y1="{y(g):.1f}" x2="{x(c):.1f}" y2="{H - B}"/><circle cx="{x(c):.1f}" cy="{y(g):.1f}" r="4"/>'
                 f'<text class="gc-name" x="{x(c) + (6 if anchor == "start" else -6):.1f}" y="{y(g) - 8 - 12 * (i % 2):.1f}" '
                 f'text-anchor="{anchor}">{esc(name)}: {g:.2f}×</text></g>')
    svg = (f'<svg class="msd-gain" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="Mirror-SD over SD '
           f'against the cost of one draft forward, in this model">'
           f'<line class="gc-ax" x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}"/><line class="gc-ax" x1="{L}" y1="{T}" '
           f'x2="{L}" y2="{H - B}"/><line class="gc-one" x1="{L}" y1="{y(1.0):.1f}" x2="{W - R}" y2="{y(1.0):.1f}"/>'
           f'{ticks}{gticks}<text class="gc-lab" x="{(L + W - R) / 2}" y="{H - 2}" text-anchor="middle">one draft forward, '
           f'in target forwards</text><path class="gc-line" d="{path}"/>{dots}</svg>')
    return (f'<div class="msd-gain-box"><div class="mc-sub">Mirror-SD over SD against the draft\'s cost <span class="mc-tag">'
            f'the model above, not a measurement</span> (window {k}, verify pass {v:.2f}, exit at {e:.0%} of the pass, '
            f'the draft on a device of its own, every step a hit; drawn at the run\'s figures, the sliders do not move it)</div>{svg}'
            f'<p class="mc-note">The gain peaks at <b>{2 - e:.2f}×</b> SD where the draft\'s window just fits in the '
            f'target\'s pass after the early exit (one draft forward {peak:.3f} target forwards here); a dearer '
            f'draft makes the target wait, a cheaper one finishes early and the exit\'s head start, {1 - e:.0%} of a '
            f'pass, is all it can save. An earlier exit raises the ceiling; sharing one device, as here, lowers '
            f'every point (the measured bar in the verdict).</p></div>')

CALC_JS = """
const PAPER_DRAFT = @PAPER_DRAFT@;
if (!element.dataset.msdCalc) {
  element.dataset.msdCalc = '1';
  const shown = (n, x) => n === 'k' ? String(Math.round(x)) : (n === 'a' || n === 'e') ? Math.round(100 * x) + '%' : x.toFixed(2);
  const calc = (box) => {
    const val = n => Number(box.querySelector('input[name="' + n + '"]').value);
    const a = val('a'), k = Math.round(val('k')), c = val('c'), v = val('v'), e = val('e');
    const tokens = a >= 0.9999 ? k + 1 : (1 - Math.pow(a, k + 1)) / (1 - a);
    const sd = tokens / (v + k * c), mirror = tokens / Math.max(v, e * v + k * c);
    const out = {tokens: tokens.toFixed(2), sd: sd.toFixed(2) + '×', mirror: mirror.toFixed(2) + '×', gain: (mirror / sd).toFixed(2) + '×'};
    box.querySelectorAll('[data-out]').forEach(o => { o.textContent = out[o.dataset.out]; });
    box.querySelectorAll('[data-show]').forEach(o => { o.textContent = shown(o.dataset.show, val(o.dataset.show)); });
  };
  element.addEventListener('input', (ev) => { const box = ev.target.closest('.msd-calc'); if (box) calc(box); });
  element.addEventListener('click', (ev) => {
    const reset = ev.target.closest('.mc-reset'), paper = ev.target.closest('.mc-paper');
    if (!reset && !paper) return;
    const box = ev.target.closest('.msd-calc');
    box.querySelectorAll('input[type=range]').forEach(i => { i.value = i.dataset.run; });
    if (paper) box.querySelector('input[name="c"]').value = String(PAPER_DRAFT);
    calc(box);
  });
}
""".replace("@PAPER_DRAFT@", repr(PAPER_DRAFT))
