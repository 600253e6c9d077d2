"""The "What if (projection)" panel: the finished run replayed on other hardware.

The numbers come from mirror_sd.latency.whatif (the recorded steps through the calibrated latency
model); this module only lays them out: a table of projected speedups per profile and method
with the measured row beside them (so profile (a)'s fidelity shows), the costs each profile
used, and a projected per-step timeline next to the measured one. Every figure and row that
is not a measurement says "projection".
"""
from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from statistics import median

import gradio as gr
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mirror_sd.latency import whatif as wi
from mirror_sd.latency import whatif_hits as wh
from mirror_sd.latency.whatif_hardware import COSTS_CHOICES, DRAFTS, TARGETS, Accelerators, project_all

from .palette import LANES as PALETTE
from .runs import LATE_BRANCHES, RunRecord, label
from .timeline import GROUP_OF, LABELS

log = logging.getLogger(__name__)
esc = html.escape
TITLE = "What if (projection)"
TIMELINE_TOKENS = 16  # each run is drawn for the decode steps that commit its first this many tokens
LANES = ("target", "draft", "verify", "transfer", "host")  # top to bottom within a method
# projected bars that no measured span has: label -> (legend name, colour)
EXTRA_LABELS = {"host": ("overhead per step (outside the model forwards)", PALETTE["host"]),
                "early exit -> draft": ("message: early-exit ids to the draft", PALETTE["message"]),
                "verdict -> draft": ("message: verdict to the draft", PALETTE["message"])}
PROFILE_CHOICES = [("(a) this machine, the model's replay", "a"),
                   ("(b) draft on a device of its own", "b"),
                   ("(c) accelerator pair", "c")]
# the editable inputs of profile (c), in the order the layout passes them
INPUTS = ("target", "draft", "target_bw_gbs", "draft_bw_gbs", "gamma", "kappa", "exit_fraction",
          "tau", "hit_rate", "draft_tokens_per_forward", "costs")
EMPTY = ('<div class="msd-whatif"><p><b>What if (projection)</b>: appears when a run has '
         'finished or a trace is loaded: the run replayed on other hardware, a projection.</p></div>')


def accelerators_from(values) -> Accelerators:
    """Accelerators from the panel's inputs (INPUTS order); window, tau, hit rate 0 = the run's."""
    d = dict(zip(INPUTS, values))
    hw = Accelerators()
    hw.target = str(d.get("target") or hw.target)
    hw.draft = str(d.get("draft") or hw.draft)
    hw.costs = str(d.get("costs") or hw.costs)
    for name in ("target_bw_gbs", "draft_bw_gbs", "exit_fraction", "draft_tokens_per_forward"):
        if d.get(name):
            setattr(hw, name, float(d[name]))
    for name in ("gamma", "kappa"):
        if d.get(name):
            setattr(hw, name, int(d[name]))
    hw.tau = float(d["tau"]) if d.get("tau") else None
    hw.hit_rate = float(d["hit_rate"]) if d.get("hit_rate") else None
    return hw


def project_state(state: dict, hw: Accelerators | None = None) -> tuple[dict, dict] | None:
    """(projection from mirror_sd.latency.whatif_hardware.project_all, record dicts by method) for the
    app's state {records, settings, meta}; None without a finished run."""
    records: dict[str, RunRecord] = {m: r for m, r in (state or {}).get("records", {}).items()
                                     if r is not None and r.finish is not None and m in wi.METHODS}
    if "ar" not in records or len(records) < 2:
        return None
    settings, meta = state.get("settings") or {}, state.get("meta") or {}
    layers = meta.get("target_layers")
    if not layers:
        raise ValueError("the run does not say how many layers its target has")
    by_method = {m: wi.record_from_run(r) for m, r in records.items()}
    gamma = int(settings.get("gamma") or 4)
    out = project_all(list(by_method.values()), target_layers=int(layers), gamma=gamma,
                         exit_layer=meta.get("exit_layer") or settings.get("exit_layer") or None,
                         branch_budget=int(settings.get("branch_budget") or 2),
                         kappa=int(settings.get("kappa") or 8), accelerators=hw,
                         source="this run's spans", settings=settings,
                         precision=meta.get("precision"),
                         pair={"target": meta.get("target"), "draft": meta.get("draft")})
    return out, by_method


def _cell(row: dict | None, ratio: bool = False) -> str:
    if not row or row.get("speedup") is None:
        return "<td>–</td>"
    tokens = f" for {row['tokens']} tokens" if row.get("tokens") else ""  # speed: tokens over time
    text = f'<b>{row["speedup"]:.2f}×</b> <small>{row["decode_s"]:.3g} s{tokens}</small>'
    if ratio and row.get("ratio"):
        text += f'<br><small title="projected / measured decode time">{row["ratio"]:.2f} of measured</small>'
    return f"<td>{text}</td>"


def _model_gap(proj: dict, methods: list[str]) -> str:
    """Profile (a)'s largest gap from the measurement, in words ('' when within 5%)."""
    gaps = {m: proj[m]["ratio"] for m in methods if (proj.get(m) or {}).get("ratio")}
    worst = max(gaps, key=lambda m: abs(gaps[m] - 1), default=None)
    if worst is None or abs(gaps[worst] - 1) < 0.05:
        return ""
    return f"; here {label(worst)}'s projected decode time is {gaps[worst]:.2f}× its measured one"


def render_table(result: dict, runs: int = 1, own_c: bool = False) -> str:
    """The speedup table: the measured row (the runs shown, the ones the projections replay),
    then one projection row per profile; row (a), the latency model on this machine, says it
    is the model's estimate and how far it is from the measurement. `own_c` (profile (c) at
    its default inputs): its row points to the first table's row (c), the verdict's figures,
    each method at the settings it picks there, rather than pricing every method at this
    run's settings beside it."""
    methods = [m for m in wi.METHODS if m in result["projected"]["a"]]
    recorded = {r.method: r for r in result["recorded"]}
    head = "".join(f"<th>{esc(label(m))}</th>" for m in methods)
    measured = "".join(
        f'<td><b>{result["measured_speedup"].get(m, 0):.2f}×</b> '
        f'<small>{recorded[m].decode_s:.3g} s</small></td>' if recorded[m].decode_s else "<td>–</td>"
        for m in methods)
    last = (f", the runs shown only (each method's middle run, the race's; their steps replayed below; the cards give the medians of {runs})"
            if runs > 1 else "")
    rows = [f'<tr class="w-measured"><th scope="row">measured on this machine{last}, for comparison '
            f'with the projections</th>{measured}</tr>']
    for key, profile in result["profiles"].items():
        proj = result["projected"][key]
        if key == "c" and own_c and (result.get("choices") or {}).get("c"):
            rows.append(f'<tr class="w-projection w-pointer"><th scope="row">projection (c): '
                        f'{esc(profile.name)}</th><td colspan="{len(methods)}">the verdict\'s figures, '
                        f'each method at the settings it picks there: the first table, row (c). Set an '
                        f'input of the projection below to price this run\'s steps at it here.</td></tr>')
            continue
        cells = "".join(_cell(proj.get(m), ratio=key == "a") for m in methods)
        run_gamma = result["calibration"].gamma
        replayed = "this run's own steps and windows, replayed" + (
            ": its settings as recorded, not the first table's picks" if key in (result.get("choices") or {}) else "")
        how = (replayed if profile.acceptance_from_run else
               f"at the window setting picked in the inputs below, {profile.calibration.gamma}, and "
               f"{profile.calibration.branch_budget} branches (this run's window setting: {run_gamma}), "
               + ("windows priced again with its costs at this run's acceptance per drafted token"
                  if profile.reprice_windows else "steps expected from the run's fitted acceptance")
               + f", not replayed: not the verdict's figures (those are the table above, row ({key}))")
        name = profile.name
        if not profile.acceptance_from_run:  # say first that it is not the verdict's row (c)
            name = (f"{name}, at window {profile.calibration.gamma} from the inputs below "
                    f"(this run's: {run_gamma}), not the verdict's figures")
        if profile.hit_source is not None:  # where its steps with the lanes in turn are priced at a hit rate
            steps = "drafted steps" if profile.reweight else "steps with the lanes in turn"
            how = (f"{how}; Mirror-SD's {steps} as expected overlapped ones at {short_source(profile.hit_source.words())}"
                   f" at this run's settings")
        if key == "a":  # the model on the measured machine: an estimate, not a second measurement
            name = "this machine, the latency model's estimate (not a measurement)"
            how = (f"{how}, each step priced at this run's median measured costs: a check of the "
                   f"model, whose gap from the measured row is its error{_model_gap(proj, methods)}")
        other = "" if profile.acceptance_from_run else " w-other"  # not the verdict's settings
        rows.append(f'<tr class="w-projection{other}"><th scope="row" title="{esc("; ".join(profile.notes))}">'
                    f'projection ({key}): {esc(name)}<br><small>{esc(how)}</small></th>{cells}</tr>')
    return (f'<table class="msd-whatif-table"><caption>Decode speed over AR (decode time, and the '
            f'tokens written in it: a speed is tokens over time, and a run that drafts writes more than '
            f'one token before its decode starts) per method: the measured run, then the projection of the same recorded steps on each '
            f'hardware profile. Where the lanes get devices of their own, (b) and (c), the Mirror-SD column '
            f'prices every step overlapped{_replay_note(runs)}'
            f'</caption><thead><tr><th scope="col">projection profile</th>{head}'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def render_costs(result: dict) -> str:
    """What each profile assumed, and what the run fed it."""
    cal = result["calibration"]
    rec = {r.method: r for r in result["recorded"]}
    m = rec.get("mirror")
    fed = [f"this run's window setting {cal.gamma}"]
    if cal.alpha_mirror is not None or cal.alpha_sd is not None:
        alpha = cal.alpha_mirror if cal.alpha_mirror is not None else cal.alpha_sd
        fed.append(f"per-token acceptance {alpha:.2f}")
    if m is not None and m.steps:
        fed.append(f"Mirror-SD {m.steps} decode steps: {m.overlapped} with the lanes overlapped ({m.hits} hits, "
                   f"{m.misses} misses), {m.in_turn} with the lanes in turn")
    items = [f"<li><b>recorded steps fed to every projection</b>: {esc(', '.join(fed))}</li>"]
    for key, profile in result["profiles"].items():
        notes = list(profile.notes)
        if key in ("a", "b"):
            c = profile.calibration
            costs = [f"target {c.t_target_1 * 1e3:.0f} ms per token" if c.t_target_1 else None,
                     f"verify of {c.gamma + 1} {c.t_target_k * 1e3:.0f} ms" if c.t_target_k else None,
                     f"draft {c.t_draft_token * 1e3:.0f} ms per token" if c.t_draft_token else None,
                     f"contention factor {wi.lane_factor(c):.2f}×",
                     "host per step " + ", ".join(f"{label(k)} {v * 1e3:.1f} ms"
                                                  for k, v in profile.host_s.items())]
            notes = [x for x in costs if x] + notes
        if not profile.acceptance_from_run:
            notes.append("expected steps from the tokens per step and the hit rate (the profile changes the window "
                         "or the acceptance)")
        if profile.hit_source is not None:
            notes.append(f"Mirror-SD's {'drafted steps' if profile.reweight else 'steps with the lanes in turn'} "
                         f"priced as expected overlapped ones at {short_source(profile.hit_source.words())}")
        items.append(f"<li><b>projection ({key}), {esc(profile.name)}</b>: {esc('; '.join(notes))}</li>")
    return f'<details class="msd-whatif-costs"><summary>costs each projection used</summary><ul>{"".join(items)}</ul></details>'


def render_panel(result: dict | None, message: str = "", hw: Accelerators | None = None, runs: int = 1,
                 projected: list | None = None) -> str:
    if result is None:
        return EMPTY if not message else (f'<div class="msd-whatif"><p>{esc(message)}</p></div>')
    lead = ("<p><b>A projection, not a measurement</b>: this run's recorded steps (accepted "
            "lengths, hits and misses) replayed through the latency model, calibrated from its "
            "own spans, on other hardware. Row (a) is the model on this machine: it should match "
            "the measured row, and the gap is the model's error.</p>")
    p = projection_of(result, hw or Accelerators())
    default = hw is None or hw == Accelerators()
    if p is not None and default:  # the verdict's line: the runs shown's figure, the rounds' range
        p["over_sd_rounds"] = _rounds(projected)
    top = projection_line(p, "the verdict's line; below: the first table, row (c)" if default else
                          "at the inputs set below; the verdict's line uses their defaults", full=True) if p else ""
    return (f'<div class="msd-whatif">{top}{render_choices(result, own_c=default, p=p if default else None)}{lead}{render_table(result, runs, own_c=default)}'
            f'{render_split(result)}{render_costs(result)}</div>')


def settings_text(chosen: dict | None) -> str:
    """A chosen method's settings in plain words ('' when none)."""
    st = (chosen or {}).get("settings") or {}
    parts = [(f"windows start at {st['gamma']} tokens and adapt" if st.get("window") == "adaptive"
              else f"windows of {st['gamma']} tokens") if st.get("gamma") else None,
             f"{st['branch_budget']} branch{'' if int(st['branch_budget']) == 1 else 'es'}" if st.get("branch_budget") else None,
             f"exit layer {st['exit_layer']}" if st.get("exit_layer") else None,
             "branches grown to the window" if st.get("branch_extend") == "on" else None]
    return ", ".join(p for p in parts if p)


def choice_row(ch: dict) -> dict:
    """One profile's row of the first table (each at the settings it picks) as text, the one source of the verdict's
    projection figures: each method's speedup over AR with its settings, and Mirror-SD over SD."""
    sd, mirror = ch.get("sd") or {}, ch.get("mirror") or {}
    fmt = lambda x: "–" if x is None else f"{x:.2f}×"  # noqa: E731
    return {"name": ch.get("name") or "", "sd": fmt(sd.get("speedup")), "sd_settings": settings_text(sd),
            "mirror": fmt(mirror.get("speedup")), "mirror_settings": settings_text(mirror),
            "ratio": fmt(ch.get("mirror_over_sd")), "speedups": {
                m: x for m, x in (("sd", sd.get("speedup")), ("mirror", mirror.get("speedup"))) if x is not None}}


def render_choices(result: dict, own_c: bool = False, p: dict | None = None) -> str:
    """Each profile with the settings it would pick among those this run can replay; what no
    profile could search, once below the table when it is the same for all; where the next
    table (`render_table`, `own_c` as there) prints a row's figures otherwise, one line says why.
    Over interleaved runs (`p`, the verdict's projection with each round's figures) the table is
    the runs shown's replay, the figures the page quotes (`over_sd_figure`), and its caption says so."""
    choices = result.get("choices") or {}
    missing = {key: tuple(map(str, ch.get("not_replayable") or [])) for key, ch in choices.items()}
    shared = len(set(missing.values())) == 1
    caption = _choices_caption(choices, p)
    rows = []
    for key, ch in choices.items():
        row = choice_row(ch)
        own = "" if shared else f'<td><small>{esc("; ".join(missing[key]) or "–")}</small></td>'
        mark = ' <span class="msd-proj-tag">the verdict\'s figures</span>' if key == "c" else ""
        rows.append(
            f'<tr data-key="{esc(key)}"><th scope="row">projection ({esc(key)}), at the settings it picks there: '
            f'{esc(row["name"])}{mark}</th>'
            f'<td><b>{row["sd"]}</b> <small>{esc(row["sd_settings"])}</small></td>'
            f'<td><b>{row["mirror"]}</b> <small>{esc(row["mirror_settings"])}</small></td>'
            f'<td><b>{row["ratio"]}</b></td>{own}</tr>')
    if not rows:
        return ""
    column = "" if shared else '<th scope="col">not searched (the run cannot replay it)</th>'
    notes = []
    if shared and next(iter(missing.values())):
        notes.append("Not searched, for every profile (the run cannot replay it): "
                     + "; ".join(next(iter(missing.values()))) + ".")
    said = {key: short_source(ch.get("hit_source")) for key, ch in choices.items() if ch.get("hit_source")}
    if said:
        notes.append("Mirror-SD's " + (next(iter(said.values())) + " in every profile"
                                       if len(set(said.values())) == 1 else
                                       "; ".join(f"({k}) {w}" for k, w in said.items()))
                     + " at the settings each profile picks in this table, whose branch budget sets how "
                       "often a branch hits (its source: the line at the top); the next table's rows run "
                       "this run's own settings, so their hit rates can differ.")
    profiles = result.get("profiles") or {}
    c = profiles.get("c")
    replays = [k for k in choices if getattr(profiles.get(k), "acceptance_from_run", False)
               and not (k == "c" and own_c) and _figures_differ(result, k)]
    if replays:
        many = len(replays) > 1
        notes.append(f"The next table's row{'s' * many} {' and '.join(f'({k})' for k in replays)} "
                     f"replay{'' if many else 's'} this run's settings as recorded, not these picks, "
                     f"so {'their' if many else 'its'} figures differ.")
    if "c" in choices and c is not None and not c.acceptance_from_run and _figures_differ(result, "c"):
        notes.append(f"The next table's row (c) runs the pair at the window setting picked in its inputs, {c.calibration.gamma}, "
                     f"with steps expected from this run's fitted acceptance; here every profile "
                     f"replays this run's own windows, hits and misses, so the two (c) figures differ.")
    foot = "".join(f'<p class="msd-whatif-note">{esc(n)}</p>' for n in notes)
    return (f'<table class="msd-whatif-table"><caption>{esc(caption)}</caption>'
            '<thead><tr><th scope="col">profile</th><th scope="col">SD over AR (the settings it picks there)</th>'
            '<th scope="col">Mirror-SD over AR (the settings it picks there)</th><th scope="col">Mirror-SD over '
            f'SD</th>{column}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>{foot}')


def _replay_note(runs: int) -> str:
    """The replay table's caption over interleaved runs: its rows replay the runs shown, as the
    first table and the verdict do ('' from one run)."""
    if runs < 2:
        return ""
    return (". Every row here replays the runs shown (each method's middle run of the "
            f"{runs}), as the first table and the verdict's figures do")


def _choices_caption(choices: dict, p: dict | None) -> str:
    """The first table's caption: over interleaved runs (`p` with each round's figures) the
    table replays the runs shown, the figures the page quotes, each run's own projections
    giving their range."""
    if not any(round_span(p, k) for k in ("b", "c") if k in choices):
        return "A projection, not a measurement: each profile with the settings it would pick among those this run can replay"
    return ("A projection, not a measurement: each profile with the settings it would pick among those "
            "the runs shown (each method's middle run) can replay, their steps replayed. These are the "
            "figures the page quotes; each run's own projection gives their range (the line above)")


def _figures_differ(result: dict, key: str) -> bool:
    """Whether the two tables' row `key` show other figures (each method over AR, as printed)."""
    first = (result.get("projected") or {}).get(key) or {}
    row = choice_row((result.get("choices") or {}).get(key) or {})
    shown = lambda x: "–" if not x or x.get("speedup") is None else f"{x['speedup']:.2f}×"  # noqa: E731
    return any(shown(first.get(m)) != row[m] for m in ("sd", "mirror"))


def render_split(result: dict) -> str:
    """The model's contention factor (its means, not the verdict's median at one window length)
    and its two parts, named apart: the core split and the interference."""
    costs = result.get("costs") or {}
    if not costs.get("contention"):
        return ""
    k = costs["contention"]
    if abs(k - 1) < 0.005:  # the gated run's lanes took turns: nothing shared, nothing to price
        return ""
    text = (f"Row (a) prices sharing this CPU with the model's contention factor, {k:.2f}×: Mirror-SD's "
            f"mean verify forward over SD's, over all verify steps. A total needs means, so it is not "
            f"the verdict's median at one window length.")
    if costs.get("interference") and costs.get("core_split"):
        text += (f" The factor is {costs['core_split']:.2f}× core split (each model gets one of the two "
                 f"cores) times {costs['interference']:.2f}× interference (one memory bus).")
    elif note := costs.get("note"):
        text += f" {note[0].upper()}{note[1:]}."
    return f'<p class="msd-whatif-split">{esc(text)}</p>'


def _x(x) -> str:
    return "–" if x is None else f"<b>{x:.2f}×</b>"


def _group(span_label: str) -> tuple[str, str]:
    """(legend name, colour) of a projected bar: the latency timeline's six groups, the two
    messages between the lanes as one, the host time: at most eight entries."""
    if span_label in GROUP_OF:
        return GROUP_OF[span_label]
    if span_label.endswith("-> draft"):
        return "message between the lanes", PALETTE["message"]
    return EXTRA_LABELS.get(span_label, (span_label, "#94a3b8"))


def _add_bars(fig, bars_by_method: dict, row: int, seen: set, suffix: str = ""):
    """One trace per legend group (the latency timeline's groups); each bar's hover names its
    own span."""
    groups: dict[tuple[str, str], dict[str, list]] = {}
    for method, bars in bars_by_method.items():
        for lane, span_label, a, b, step in bars:
            g = groups.setdefault(_group(span_label), {"x": [], "base": [], "y": [], "text": []})
            g["x"].append(max(b - a, 0.0))
            g["base"].append(a)
            g["y"].append(f"{label(method)} · {lane}{suffix}")
            name = (LABELS.get(span_label) or EXTRA_LABELS.get(span_label) or (span_label,))[0]
            g["text"].append(f"{label(method)} · {name}, step {step}: {(b - a) * 1e3:.2f} ms{suffix}")
    for (name, colour), g in groups.items():
        fig.add_trace(go.Bar(x=g["x"], base=g["base"], y=g["y"], orientation="h", marker_color=colour,
                             name=name, legendgroup=name, showlegend=name not in seen, width=0.7,
                             hoverinfo="text", hovertext=g["text"], marker_line_width=0), row=row, col=1)
        seen.add(name)


def late_marked(bars: list) -> list:
    """Measured bars with a branch forward begun at or after its step's verdict drawn as drafting
    the target waits for (LATE_BRANCHES), as the latency timeline draws it: the verdict is the end
    of the step's target and verify bars, and a step none of whose target bars is drawn had its
    verdict before the chart's start (the first commit), so all its drawn branches came after."""
    ends: dict[int, float] = {}
    for lane, _, _, b, step in bars:
        if lane in ("target", "verify"):
            ends[step] = max(ends.get(step, b), b)
    return [(lane, LATE_BRANCHES if span == "branches" and lane == "draft" and a >= ends.get(step, float("-inf"))
             else span, a, b, step) for lane, span, a, b, step in bars]


def steps_for_tokens(rec, tokens: int) -> int:
    """Decode steps a run took to commit `tokens` tokens (AR: one per step; a verify step: its
    accepted drafts plus the target's own), so every run is drawn for the same tokens."""
    per_step = [a + 1 for a in rec.accepted] if rec.accepted else []
    total = 0
    for i, n in enumerate(per_step, 1):
        total += n
        if total >= tokens:
            return i
    return len(per_step) or tokens


def build_figure(result: dict | None, by_method: dict | None, profile: str = "c") -> go.Figure:
    """The first decode steps of each run: measured (top) and the projection (bottom), each on
    its own time axis (the profiles differ by orders of magnitude)."""
    profile = profile if profile in ("a", "b", "c") else "c"
    name = dict((v, k) for k, v in PROFILE_CHOICES).get(profile, profile)
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.2, subplot_titles=(
        f"measured on this machine (for comparison with the projection): the decode steps that write {TIMELINE_TOKENS} tokens",
        f"projection {name}: the recorded steps of the first {TIMELINE_TOKENS} tokens at this run's settings, "
        f"not whole runs nor the settings each would pick there (the tables give those)"))
    if result is None or not by_method:
        fig.add_annotation(text="The projection appears when a run has finished.", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5)
        fig.update_layout(height=260, template="plotly_white", title="What if (projection)")
        return fig
    seen: set = set()
    recorded = {r.method: r for r in result["recorded"]}
    methods = [m for m in reversed(wi.METHODS) if m in by_method and m in recorded]
    steps = {m: steps_for_tokens(recorded[m], TIMELINE_TOKENS) for m in methods}
    measured = {m: late_marked(wi.measured_timeline(by_method[m], steps[m])["bars"]) for m in methods}
    projected = {m: wi.projected_timeline(recorded[m], result["profiles"][profile], steps[m])["bars"]
                 for m in methods}
    counts = []
    for row, bars, suffix in ((1, measured, ""), (2, projected, " (projection)")):
        _add_bars(fig, bars, row, seen, suffix)
        lanes = [f"{label(m)} · {lane}{suffix}" for m in wi.METHODS if m in bars
                 for lane in LANES if any(b[0] == lane for b in bars[m])]
        fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)), row=row, col=1)
        counts.append(max(1, len(lanes)))
    # each lane gets the same height in both plots; the titles follow their plots
    split = 0.8 * counts[1] / sum(counts)
    fig.update_yaxes(domain=[0.0, split], row=2, col=1)
    fig.update_yaxes(domain=[split + 0.2, 1.0], row=1, col=1)
    fig.layout.annotations[1].update(y=split + 0.01, yanchor="bottom")
    fig.update_xaxes(title_text="seconds from the first commit (measured, beside the projection)",
                     title_standoff=4, row=1, col=1)
    fig.update_xaxes(title_text="seconds from the first commit (projection)", title_standoff=4,
                     row=2, col=1)
    fig.update_layout(barmode="overlay", height=260 + 30 * sum(counts), template="plotly_white", bargap=0.25,
                      title="What if (projection): measured steps and the projected steps",
                      margin=dict(l=10, r=10, t=70, b=40),
                      legend=dict(orientation="h", yanchor="top", y=-0.12, x=0, font=dict(size=10)))
    return fig


def update(state, profile, *values):
    """Gradio handler: (panel HTML, figure) for the app's state and profile (c)'s inputs."""
    try:
        hw = accelerators_from(values)
        got = project_state(state or {}, hw)
    except ValueError as e:  # a bad input: say which, keep the page
        return render_panel(None, f"What if (projection): {e}"), build_figure(None, None)
    except Exception as e:  # never a traceback in the page; the log keeps it
        log.exception("what-if projection failed")
        return (render_panel(None, f"What if (projection) failed: {type(e).__name__}: {e}"),
                build_figure(None, None))
    if got is None:
        return render_panel(None), build_figure(None, None)
    result, by_method = got
    runs = len((state or {}).get("rounds") or []) or 1
    return (render_panel(result, hw=hw, runs=runs, projected=(state or {}).get("projected")),
            build_figure(result, by_method, profile))


def input_defaults() -> dict:
    """Profile (c)'s defaults for the layout's inputs, in INPUTS order (window, tau, hit rate 0 =
    the run's own)."""
    hw = Accelerators()
    d = {k: getattr(hw, k) for k in INPUTS}
    d.update(tau=0, hit_rate=0, gamma=0)
    return d


TARGET_CHOICES, DRAFT_CHOICES = list(TARGETS), list(DRAFTS)


@dataclass
class Panel:
    """The panel's components (built inside the app's Blocks by `build_panel`)."""
    html: object
    figure: object
    profile: object
    inputs: list

    def wire(self, state) -> None:
        """Re-project when a run finishes or a trace loads (the state changes) and when an
        input of profile (c) or the timeline's profile changes."""
        event = dict(fn=update, inputs=[state, self.profile, *self.inputs],
                     outputs=[self.html, self.figure], api_visibility="private",
                     show_progress="hidden", concurrency_limit=None, queue=False)
        state.change(**event)
        for component in [self.profile, *self.inputs]:
            component.change(**event)


def build_panel() -> Panel:
    """The "What if (projection)" section: table, projected timeline, profile (c)'s inputs."""
    d = input_defaults()
    with gr.Column(elem_id="whatif"):
        table = gr.HTML(render_panel(None), elem_id="whatif-panel")
        profile = gr.Radio(PROFILE_CHOICES, value="c", label="projected timeline: hardware profile "
                           "(projection)", elem_id="whatif-profile")
        figure = gr.Plot(None, show_label=False, elem_id="whatif-timeline")  # drawn after a run
        with gr.Accordion("(c) accelerator pair: inputs of the projection", open=False):
            with gr.Row():
                target = gr.Dropdown(TARGET_CHOICES, value=d["target"], label="target size")
                draft = gr.Dropdown(DRAFT_CHOICES, value=d["draft"], label="draft size")
                target_bw = gr.Number(d["target_bw_gbs"], label="target GPU bandwidth, GB/s (achieved)")
                draft_bw = gr.Number(d["draft_bw_gbs"], label="draft NPU bandwidth, GB/s (achieved)")
            with gr.Row():
                gamma = gr.Slider(0, 12, value=d["gamma"], step=1,
                                  label="drafted tokens per window (γ; 0 = the run's, as the verdict)")
                kappa = gr.Slider(1, 32, value=d["kappa"], step=1, label="early-exit guesses per position (κ)",
                                  info="no cost term: the hit rate stays the run's unless set")
                exit_fraction = gr.Slider(0.1, 0.9, value=d["exit_fraction"], step=0.05,
                                          label="early exit at this fraction of the layers")
            with gr.Row():
                tau = gr.Number(d["tau"], label="tokens per verify step at this window (0 = the run's acceptance)")
                hit_rate = gr.Number(d["hit_rate"], minimum=0, maximum=1,
                                     label="Mirror-SD hit rate (0 = the run's)")
                per_forward = gr.Number(d["draft_tokens_per_forward"], minimum=1,
                                        label="draft tokens per forward (speculative streaming)")
            with gr.Row():
                costs = gr.Radio(list(COSTS_CHOICES), value=d["costs"], label="forward times",
                                 info="roofline: weight bytes over the bandwidths above; measured-h200: "
                                      "the engine's own (eager) forwards timed on an NVIDIA H200 by the "
                                      "GPU check, each lane on a device of its own (the bandwidths are "
                                      "then unused)")
    return Panel(table, figure, profile, [target, draft, target_bw, draft_bw, gamma, kappa,
                                          exit_fraction, tau, hit_rate, per_forward, costs])


def best_projection(state: dict) -> dict | None:
    """For the verdict, the one projection the What-if fold shows with the same figures: profile
    (c), the accelerator pair at the fold's default inputs, each method at the settings it would
    pick there among those this run can replay (the fold's first table, row (c)); its inputs
    named; with every profile's row of that table ("rows": (b) is the draft on a device of its
    own). None without a finished run or where the projection fails (the fold says why)."""
    hw = Accelerators()
    try:
        got = project_state(state or {}, hw)
    except Exception:
        log.exception("projection for the verdict failed")
        return None
    if got is None:
        return None
    p = projection_of(got[0], hw)
    if p is not None:
        # Mirror-SD over SD in each interleaved round (state["projected"], over_sd_of): how far
        # one run's projection moves on the same prompt, shown beside it
        p["over_sd_rounds"] = _rounds((state or {}).get("projected"))
    return p


def _rounds(projected: list | None) -> dict:
    """{profile key: Mirror-SD over SD per round} from the rounds' `over_sd_of` figures."""
    rounds = [r for r in projected or [] if r]
    return {k: [r[k] for r in rounds if r.get(k) is not None] for k in ("b", "c")}


def over_sd_of(state: dict) -> dict:
    """{profile key: Mirror-SD over SD} of the verdict's projection for one round's records
    ({} where it cannot be made)."""
    p = best_projection(state)
    return {k: v for k, v in ((p or {}).get("over_sd") or {}).items() if v is not None}


def rounds_words(p: dict, key: str) -> str:
    """'the runs shown replayed (with each of the 3 runs' own projections, the range 0.98–1.25×)': how the figure
    `over_sd_figure` quotes at profile `key` was made from the interleaved rounds, with their
    range ('' from fewer than two)."""
    values = range_values(p, key)
    if not values:
        return ""
    either = (": on both sides of 1×, so these runs cannot say whether Mirror-SD would pass SD there"
              if rounds_span_one(p, key) else "")
    return (f"{figure_words(p, key)} (with each of the {len(round_span(p, key))} runs' own "
            f"projections, the range {min(values):.2f}–{max(values):.2f}×{either})")


def figure_words(p: dict | None, key: str) -> str:
    """"the runs shown replayed": how `over_sd_figure` at profile `key` was made where the runs
    were interleaved ('' from one run, where it is the run's own)."""
    return "the runs shown replayed" if round_span(p, key) else ""


def over_sd_figure(p: dict | None, key: str) -> float | None:
    """Mirror-SD over SD at profile `key` as the page quotes it (the status, the verdict, the pay
    chart, the What-if fold's lines and tables): the runs shown replayed (each method's middle run
    by speed, the runs whose times the cards' medians are), one figure everywhere; each
    interleaved round's own projection gives its range (`range_values`). Where the runs shown
    cannot be replayed, the rounds' median; None without either."""
    shown = ((p or {}).get("over_sd") or {}).get(key)
    if shown is not None:
        return shown
    values = round_span(p, key)
    return median(values) if values else None


def rounds_span_one(p: dict, key: str) -> bool:
    """Whether Mirror-SD over SD at profile `key` lies below 1× in one interleaved round and
    above it in another (the rounds cannot tell which would be faster there)."""
    values = [round(v, 2) for v in range_values(p, key)]  # as printed: 0.92–1.00× is not above 1×
    return len(values) > 1 and min(values) < 1 < max(values)


def round_span(p: dict | None, key: str) -> list[float]:
    """The interleaved rounds' Mirror-SD over SD at profile `key`, each round's own records
    projected: the figures whose range the page gives beside its figure; [] from fewer than two
    rounds."""
    values = round_values(p, key)
    return values if len(values) > 1 else []


def range_values(p: dict | None, key: str) -> list[float]:
    """The figures a printed range at profile `key` spans: each interleaved round's projection
    and the runs shown's replay (each method's middle run, from different rounds: the What-if
    tables' figures), so that no figure the page prints for that profile falls outside the
    range it gives; [] from fewer than two rounds."""
    values = round_span(p, key)
    shown = ((p or {}).get("over_sd") or {}).get(key)
    return values + [shown] if values and shown is not None else values


def round_values(p: dict | None, key: str) -> list[float]:
    """Mirror-SD over SD at profile `key`, one value per interleaved round."""
    return ((p or {}).get("over_sd_rounds") or {}).get(key) or []


def projection_of(result: dict, hw: Accelerators) -> dict | None:
    """The projection the verdict cites, from a What-if result at the inputs `hw`."""
    choices = result.get("choices") or {}
    row = choice_row(choices.get("c") or {})
    if "mirror" not in row["speedups"]:
        return None
    sources = result.get("hit_source") or {}
    # the source of each row's figures (a pick at another branch budget: the run's rate there)
    said = {key: ch.get("hit_source") or (sources[key].words() if key in sources else None)
            for key, ch in choices.items()}
    source = said.get("c")
    inputs = (f"a {TARGETS[hw.target].name} target on a GPU ({hw.target_bw_gbs:.0f} GB/s), "
              f"a {DRAFTS[hw.draft].name} draft on an NPU ({hw.draft_bw_gbs:.0f} GB/s), this run's "
              f"acceptance, " + (source or "this run's hits"))
    series = result.get("hit_series") or {}
    short = short_source(source) if source else "this run's hits"
    brief = {**series.get("c"), "source_short": short.split(" (")[0].replace("hit rate ", "the ", 1) + " hit rate"} \
        if series.get("c") and short.startswith("hit rate ") and "unknown" not in short else series.get("c")
    return {"key": "c", "profile": f"(c) {row['name'] or result['profiles']['c'].name}",
            "inputs": inputs, "row": row, "speedups": row["speedups"],
            "rows": {key: choice_row(ch) for key, ch in choices.items()},
            "over_sd": {key: ch.get("mirror_over_sd") for key, ch in choices.items()},
            "over_sd_run_settings": _over_sd(result.get("projected") or {}),
            # where the hit rate comes from, per profile, and Mirror-SD over SD against it
            "hit_source": source, "hit_source_of": said,
            "hit_sources": {k: src.to_dict() for k, src in sources.items()},
            "hit_series": series,
            "draft_share": _draft_shares(result.get("profiles") or {}),
            "over_sd_range": {k: wh.ratio_range(v) for k, v in series.items()},
            # the source in full once in the What-if fold, in short elsewhere (`projection_line`)
            "inputs_short": inputs.replace(source, f"{short} (its source: the What-if fold)") if source else inputs,
            "series_line": wh.series_words(series.get("c"), "From the runs shown, on the accelerator pair"),
            "series_short": wh.series_words(brief, "From the runs shown, on the accelerator pair")}


def _draft_shares(profiles: dict) -> dict:
    """{profile key: one draft token's forward over a one-token target forward} for (b) and (c)."""
    out = {}
    for key in ("b", "c"):
        cal = getattr(profiles.get(key), "calibration", None)
        if cal is not None and cal.t_draft_token and cal.t_target_1:
            out[key] = cal.t_draft_token / cal.t_target_1
    return out


def _over_sd(projected: dict) -> dict:
    """Mirror-SD over SD per profile in the replay table (this run's own settings)."""
    out = {}
    for key, proj in projected.items():
        sd, mirror = (proj.get(m) or {} for m in ("sd", "mirror"))
        if sd.get("speedup") and mirror.get("speedup") is not None:
            out[key] = mirror["speedup"] / sd["speedup"]
    return out


def short_source(words: str | None) -> str:
    """A hit rate's source in short, and whose ('hit rate 94% (Mirror-SD's steps in this run)'), for every place but the one that says it
    in full (the top of the What-if fold, its verdict line)."""
    if not words:
        return ""
    if words.startswith("hit rate unknown") and "the figures take " in words:
        return "hit rate unknown, the figures take " + words.rsplit("the figures take ", 1)[1]
    rate = words.split(",")[0].split(" (")[0]
    whose = (" (a benchmark's, this pair's lanes always overlapped)" if "in a benchmark" in words else
             " (Mirror-SD's steps in this run, those in turn checked after it)" if "checked after the run" in words
             else " (Mirror-SD's steps in this run)" if "this run's" in words else "")
    return rate + whose


def projection_line(p: dict, where: str = "What if, first table, row (c)",
                    series: bool = True, full: bool = False) -> str:
    """The projection in one short line, its inputs named (the hit rate's source and the steps
    behind it among them), the same words in the verdict and at the top of the What-if fold:
    each method over AR and Mirror-SD over SD in the replay of the runs shown (the first table's
    row (c), `over_sd_figure`), over interleaved runs with the range of their own projections; with
    `series`, under it one line of Mirror-SD over SD against the hit rate (where the hit rate is
    unknown, the range over hit rates 0-100%): the fold's, not the verdict's."""
    row = p["row"]
    settings = "; ".join(f"{label(m)}: {row[m + '_settings']}" for m in ("sd", "mirror")
                         if row.get(m + "_settings"))
    inputs = esc(p["inputs"] if full else p.get("inputs_short", p["inputs"]))
    figures = f'<b class="msd-proj-figures">SD {row["sd"]} AR, Mirror-SD {row["mirror"]} AR</b>'
    said = (f'replaying the steps of {"the runs shown" if round_span(p, "c") else "this run"} ({inputs}): '
            f'{figures}, so Mirror-SD <b class="msd-proj-ratio">{row["ratio"]}</b> SD')
    if rounds := rounds_words(p, "c"):
        said += esc(rounds.removeprefix(figure_words(p, "c")))
    line = (f'<p class="msd-projection" title="{esc("Each method at the settings it would pick there: " + settings)}">'
            f'<span class="msd-proj-tag">projection, not a measurement</span> '
            f'On an accelerator pair (target GPU, draft NPU), larger models than the pair that ran here, '
            f'{said} <span class="msd-more">({esc(where)})</span></p>')
    said = p.get("series_short", p.get("series_line"))  # the source said in full in the line above
    # the runs shown's curve against the hit rate; not where the runs' own projections fall on
    # both sides of 1×: the line above says those runs cannot tell, and a curve of one mix of runs
    # saying "passes" or "does not pass" beside it would read as a contradiction
    if series and said and not rounds_span_one(p, "c"):
        line += (f'<p class="msd-projection msd-hit-series"><span class="msd-proj-tag">projection</span> '
                 f'{esc(said)}.</p>')
    return line
