"""“How it works”, with the figures of the run that is on screen: the exit layer it used, the
target's layer count, the time the early exit left the draft to work in; the paragraphs that
concern the pair that ran (the cross-tokenizer one only for a cross-tokenizer pair)."""
from __future__ import annotations

import html
from statistics import median

from .figures import cards
from .runs import RunRecord
from .runs import label
from .stepmodel import render_calc
from .zoom import step_suffix_ms, zoom_record, zoom_step

esc = html.escape

INTRO = ("A large language model (the <i>target</i>) writes one token at a time, and every token "
         "costs a full pass through all its layers. <b>Speculative decoding (SD)</b> lets a small, "
         "fast model (the <i>draft</i>) guess the next few tokens (a <i>window</i>); the target "
         "then checks the whole window in one pass (a <i>verify step</i>), keeps the guesses it "
         "agrees with, and writes one token of its own. The text is exactly what the target alone "
         "would write; only the speed changes. In plain SD the two models take turns: while the "
         "draft guesses, the target waits.")
MIRROR = ("<b>Mirror-SD</b> is built to remove that wait. Part-way through its verify pass the target peeks "
          "at what it is likely to say (an <i>early exit</i>) and hands its top guesses to the draft. "
          "The draft writes the likely next windows from them (<i>branches</i>) while the target "
          "finishes; one branch may start earlier, on the draft's own guess. If the target's verdict "
          "matches a branch (a <b>branch hit</b>), the next window is already under way. If the draft "
          "finishes that branch only after the verdict, the target waits for the rest (a <b>late "
          "hit</b>): common here, where both models share the cores (the zoomed step gives this run's "
          "figures). If no branch matches (a <b>branch miss</b>), the draft writes the next window "
          "after the verdict, as in plain SD. The full target still checks every token, so the text "
          "does not change.")
GATE = ("<b>Mirror-SD, gated.</b> Overlapping the two models pays only when each has "
        "hardware of its own. The page's Mirror-SD overlaps them in every step, whatever that costs "
        "here, so its hits, misses and branches show. <b>Mirror-SD (gated)</b>, a tick under "
        "Methods, times its steps instead: it runs a step with the models one after the other "
        "(<i>in turn</i>, as SD does) whenever that measured faster, the <i>overlap gate</i>, and "
        "checks after the run, untimed, whether each such step would have hit.")
# the words the page uses, each in one short line (the longer definitions are on hover: GLOSSARY)
WORDS = (
    ("window", "the tokens the draft guesses before the target checks them"),
    ("verify step", "one target pass over a window: it keeps the guesses it agrees with and writes one token"),
    ("bonus token", "the target's own token after a window it kept whole: free, from the same pass"),
    ("early exit", "the target's likely next tokens, read part-way through its layers"),
    ("exit lens", "a small trained correction that makes those half-way guesses match more often"),
    ("root, score", "where a branch starts (keep j drafted tokens, then token v), and how likely the verdict lands there"),
    ("branch budget", "at most this many branches per step (the exit's guesses and the draft's own)"),
    ("hit, late hit, miss", "a branch began with the target's token (ready by the verdict, or after it); or none did"),
    ("priced window, prompt lookup", "SD drafts only as many tokens as pay at this machine's costs; "
     "where the text repeats itself, it copies what followed the same words earlier, at no model's cost"),
    ("kept n of m", "how many of a window's m drafted tokens the target agreed with: a hit can keep 0"),
    ("in turn, overlapped", "the two models one after the other, as SD; or at the same time"),
    ("overlap gate", "per step, Mirror-SD runs in turn where that measured faster on this machine"),
    ("hidden, exposed", "draft time beside the target's work; or time the target waited for the draft"),
)
CROSS = ("<b>Another tokenizer.</b> This run's draft spells text with other tokens than the "
         "target. It proposes only the tokens both vocabularies spell the same, and the target "
         "checks them as usual, so the text still does not change; the pair check says how many "
         "tokens are shared.")


def _suffix_ms(rec: RunRecord) -> float | None:
    """Median over the steps of the target's work after the early exit: the time the draft
    has to write its branches without making the target wait."""
    per_step: dict[int, float] = {}
    for s in rec.spans:
        if s.label == "suffix" and s.step > 0:
            per_step[s.step] = per_step.get(s.step, 0.0) + (s.end_ns - s.start_ns) / 1e6
    return median(per_step.values()) if per_step else None


def _this_run(records: dict[str, RunRecord], meta: dict) -> str:
    mirror = zoom_record(records)  # the run the zoom above draws a step of
    layer, layers = meta.get("exit_layer"), meta.get("target_layers")
    if mirror is None or not layer or not layers:
        return ""
    text = (f"In this run the target has {layers} layers and the early exit came after layer "
            f"{layer} ({layer / layers:.0%} of the way through)")
    after = _suffix_ms(mirror)
    if after is not None:
        text += (f", which left the draft of {label(mirror.method)} about {after:.0f} ms per step (the "
                 f"median over its steps split at the exit) to write its branches while the target ran "
                 f"layers {layer + 1}–{layers}")
        step = zoom_step(mirror)
        shown = step_suffix_ms(mirror, step) if step is not None else None
        if shown is not None:
            text += f"; in the step zoomed in above, {shown:.0f} ms"
    return f"<p>{esc(text)}.</p>"


def _lane(y: int, bars, label: str) -> str:
    out = [f'<text x="0" y="{y + 15}" class="d-lab">{label}</text>']
    for x, w, cls, text in bars:
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="22" rx="3" class="{cls}"/>')
        if text:
            dark = " on-light" if cls in ("d-t2", "d-d", "d-r") else ""  # dark text on the light bars
            out.append(f'<text x="{x + w / 2}" y="{y + 15}" class="d-in{dark}" text-anchor="middle">{text}</text>')
    return "".join(out)


def diagram(compact: bool = False) -> str:
    """The algorithm in one picture: SD's two models taking turns against Mirror-SD's draft
    writing branches beside the target's second half (not to scale). `compact`: short labels
    that stay legible at the race's side, where the picture is drawn small."""
    words = ({"v1": "verify", "v2": "verify", "dw": "draft", "before": "to the exit",
              "after": "after the exit", "sd": "SD: the models take turns",
              "mirror": "Mirror-SD: the draft writes beside the target",
              "scale": "time → (the ideal, not to scale)"} if compact else
             {"v1": "target verifies a window", "v2": "verifies the next", "dw": "draft writes the next",
              "before": "to the exit", "after": "after the exit",
              "sd": "SD: the models take turns, the target waits while the draft writes",
              "mirror": "Mirror-SD: the draft guesses on its own, then from the early exit (pink) writes branches",
              "scale": "time → (the ideal, not to scale; on shared cores a branch often ends after the verdict)"})
    sd = (_lane(22, [(90, 150, "d-t", words["v1"]), (400, 150, "d-t", words["v2"])], "target")
          + _lane(50, [(240, 160, "d-dw", words["dw"])], "draft")
          + f'<text x="0" y="12" class="d-note">{words["sd"]}</text>')
    mirror = (_lane(112, [(90, 90, "d-t", words["before"]), (180, 16, "d-e", ""), (196, 110, "d-t2", words["after"]),
                          (306, 14, "d-v", ""), (320, 90, "d-t", words["before"]), (410, 16, "d-e", ""),
                          (426, 110, "d-t2", words["after"])], "target")
              + _lane(140, [(100, 70, "d-r", "reads"), (196, 110, "d-d", "branches"), (330, 70, "d-r", "reads"),
                            (426, 110, "d-d", "branches")], "draft")
              + '<path d="M188 134 L 200 140" class="d-arrow"/><path d="M313 134 L 320 112" class="d-arrow"/>'
              + f'<text x="0" y="100" class="d-note">{words["mirror"]}</text>')
    return (f'<div class="msd-diagram-wrap"><svg class="msd-diagram{" is-compact" if compact else ""}" '
            f'viewBox="0 0 560 172" role="img" aria-label="SD against '
            f'Mirror-SD on a time axis">{sd}{mirror}'
            f'<text x="548" y="170" class="d-lab" text-anchor="end">{words["scale"]}</text></svg></div>')


def race_key() -> str:
    """Beside the race: the two schedules it compares, in one small picture (the diagram of How
    it works, which folds away once a run starts)."""
    return f'<div class="msd-race-key">{diagram(compact=True)}</div>'


def flow(layer: int | None = None, layers: int | None = None) -> str:
    """The algorithm of one Mirror-SD step as a plain diagram (HTML and CSS): the target's lane
    (layers before the early exit, the exit, the layers after it, the verdict) beside the
    draft's lane (branches from the exit's top guesses, written while the target finishes),
    and the verdict's two outcomes: a hit reuses a branch, a miss falls back to drafting."""
    before = f"layers 1–{layer}" if layer else "layers up to the exit"
    after = f"layers {layer + 1}–{layers}" if layer and layers else "layers after the exit"
    box = lambda cls, area, title, text: (f'<div class="f-box {cls}" style="grid-area:{area}">'  # noqa: E731
                                          f'<b>{title}</b><span>{text}</span></div>')
    cells = [
        '<div class="f-name" style="grid-area:tn">target</div>',
        box("f-t f-next", "t1", before, "the verify pass starts"),
        box("f-e f-next", "t2", "early exit", "its top guesses for the next tokens"),
        box("f-t2 f-next", "t3", after, "the pass finishes"),
        box("f-v", "t4", "verdict", "drafted tokens kept, the target's own token"),
        '<div class="f-down" style="grid-area:a2">↓ guesses</div>',
        '<div class="f-down" style="grid-area:a4">↓</div>',
        '<div class="f-name" style="grid-area:dn">draft</div>',
        box("f-d", "d3", "branches, beside the target", "a few possible next windows, each grown from "
                                                       "one of the exit's top guesses (as many as the "
                                                       "branch budget allows; one may be the draft's "
                                                       "own guess, begun before the exit)"),
        box("f-hit", "o1", "hit → reuse", "a branch starts with the verdict's token: it is the next "
                                         "window, already written"),
        box("f-miss", "o2", "miss → fall back", "no branch matches: the draft writes the next window "
                                               "now, the target waits (as in SD)"),
    ]
    return ('<div class="msd-flow" role="img" aria-label="One Mirror-SD step: the target lane '
            'beside the draft lane, the verdict reusing a branch or falling back">'
            + "".join(cells) + '</div>')


def _measured_sd(records: dict[str, RunRecord]) -> float | None:
    """SD's decode speed over AR's in the runs on screen (the cards' figure), for the model's box."""
    if not {"ar", "sd"} <= set(records):
        return None
    got = cards({m: r for m, r in records.items() if r is not None and r.finish is not None})
    return got["sd"].decode_speedup if "sd" in got else None


def words() -> str:
    """The page's words, one short line each (How it works' last part)."""
    rows = "".join(f"<dt>{esc(w)}</dt><dd>{esc(d)}</dd>" for w, d in WORDS)
    return f'<h4>Words on this page</h4><dl class="msd-words">{rows}</dl>'


def render_how(records: dict[str, RunRecord], meta: dict, replay_b: float | None = None) -> str:
    """The section for the run on screen; the general text before any run. `replay_b`: Mirror-SD
    over SD with the draft on a device of its own, this run's steps replayed (the pay chart's
    figure), for the step model to set beside its own."""
    parts = [f"<p>{INTRO}</p>"]
    if not records or "mirror" in records:
        meta = meta or {}
        parts.append(f"<p>{MIRROR}</p><h4>One step of Mirror-SD</h4>"
                     f"{flow(meta.get('exit_layer'), meta.get('target_layers'))}"
                     f"<h4>On a time axis, against SD (not to scale)</h4>{diagram()}")
    parts.append(render_calc(records, meta or {}, _measured_sd(records), replay_b))
    if not records or "mirror" in records:
        parts.append(f"<p>{GATE}</p>")
    if records:
        parts.append(_this_run(records, meta))
    if (meta or {}).get("cross"):
        parts.append(f"<p>{CROSS}</p>")
    parts.append(words())
    return f'<div class="msd-how">{"".join(parts)}</div>'
