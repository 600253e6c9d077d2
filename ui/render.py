"""Pure functions from run records to HTML: the token panes, the legend, the summary, status.

Every piece of model or user text goes through `html.escape`; tokens sit in a <pre> with
`white-space: pre-wrap`, so code keeps its indentation and copies out unchanged.
"""
from __future__ import annotations

import html
import unicodedata

from .runs import METHOD_ORDER, SHORT_NAMES, RunRecord, analyse, compare_tokens, live_stats, measured
from .texts import GLOSSARY, LEGEND, LEGEND_MARKS
from .why import (LEVERS, PART_NAMES, PARTS, breakdown, contention, costs, cross_sentence,
                  early_exit_share, why_sentence)

esc = html.escape
KEEP = {"\n", "\t", "\r"}


def shown(text: str) -> str:
    """Token text for the page: a character no font can draw (control, private use, unassigned,
    a lone surrogate) becomes a visible U+XXXX escape; everything else, CJK included, stays."""
    out = []
    for ch in text:
        if ch not in KEEP and unicodedata.category(ch) in ("Cc", "Co", "Cn", "Cs"):
            out.append(f"U+{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


def token_spans(rec: RunRecord) -> str:
    """The committed tokens, one <span> per token, coloured by kind; a token of whitespace
    alone is marked quietly (a dotted underline in its kind's colour), not as a blank brick."""
    out = []
    for t in analyse(rec).tokens:
        label = LEGEND.get(t.kind, (t.kind, ""))[0]
        ws = " ws" if t.text and not t.text.strip() else ""
        out.append(f'<span class="msd-tok k-{esc(t.kind)}{ws}" data-step="{t.step}" '
                   f'title="step {t.step} · {esc(label)} · id {t.token_id}">{esc(shown(t.text))}</span>')
    return "".join(out)


def render_legend() -> str:
    items = "".join(
        f'<span class="msd-legend-item" title="{esc(tip)}"><span class="msd-tok k-{kind}">'
        f'{esc(label)}</span></span>' for kind, (label, tip) in LEGEND.items())
    marks = "".join(f'<span class="msd-legend-item" title="{esc(tip)}"><span class="{cls}">'
                    f'{esc(label)}</span></span>' for cls, (label, tip) in LEGEND_MARKS.items())
    return (f'<div class="msd-legend" role="list" aria-label="token colours">{items}{marks}'
            f'<span class="msd-legend-hint">hover a colour, a token or a dotted word for details</span></div>')


def term(word: str, key: str | None = None) -> str:
    """A word with its definition on hover (the glossary)."""
    tip = GLOSSARY.get(key or word, "")
    return f'<abbr class="msd-term" title="{esc(tip)}">{esc(word)}</abbr>' if tip else esc(word)


def _fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


PANE_STATES = {"waiting": "waiting", "running": "running…", "done": "done",
               "stopped": "stopped", "error": "error", "cached": "cached result",
               "replay": "replay", "skipped": "not run"}


def render_pane(method: str, rec: RunRecord | None, state: str, now_ns: int | None = None,
                note: str = "") -> str:
    """One run: name, state, elapsed time, tokens, tokens/s, then the coloured text."""
    name = SHORT_NAMES.get(method, method)
    stats = live_stats(rec, now_ns) if rec is not None else None
    head = [f'<span class="msd-name">{esc(name)}</span>',
            f'<span class="msd-badge s-{esc(state)}">{esc(PANE_STATES.get(state, state))}</span>']
    if stats is not None:
        head.append(f'<span class="msd-stat"><b>{stats["elapsed_s"]:.1f}</b> s</span>'
                    f'<span class="msd-stat"><b>{stats["tokens"]}</b> tokens</span>')
        if stats.get("decode_tokens_per_s"):
            head.append(f'<span class="msd-stat" title="tokens after the first, over the time after '
                        f'the first commit">decode <b>{stats["decode_tokens_per_s"]:.2f}</b> tok/s</span>'
                        f'<span class="msd-stat" title="from the run\'s start to its first '
                        f'committed tokens">prefill <b>{stats["prefill_s"]:.2f}</b> s</span>')
        else:
            head.append(f'<span class="msd-stat"><b>{stats["tokens_per_s"]:.2f}</b> tok/s</span>')
    body = token_spans(rec) if rec is not None else ""
    if not body:
        body = f'<span class="msd-placeholder">{esc(note or "no output yet")}</span>'
        note = ""
    notes = ""
    if rec is not None:
        notes = "".join(f'<div class="msd-error">{esc(m)}</div>' for m in rec.errors)
        notes += "".join(f'<div class="msd-notice">{esc(m)}</div>' for m in rec.notices)
    if note:
        notes += f'<div class="msd-note">{esc(note)}</div>'
    return (f'<div class="msd-pane m-{esc(method)}" data-state="{esc(state)}">'
            f'<div class="msd-pane-head">{"".join(head)}</div>'
            f'<pre class="msd-tokens">{body}</pre>{notes}</div>')


def render_status(message: str, level: str = "info", fraction: float | None = None) -> str:
    """The status line: progress of loading and runs, stop and error messages."""
    bar = ""
    if fraction is not None:
        pct = max(0.0, min(1.0, fraction)) * 100
        bar = f'<div class="msd-progress"><div style="width:{pct:.0f}%"></div></div>'
    return f'<div class="msd-status l-{esc(level)}">{esc(message)}{bar}</div>'


METRICS = [  # (label, key in measured() or Finish.stats, format, glossary key)
    ("new tokens", "tokens", "d", None),
    ("wall time (s)", "wall_s", ".2f", None),
    ("prefill (s): start to first committed tokens", "prefill_s", ".2f", "prefill"),
    ("decode tokens / s (after the first commit)", "decode_tokens_per_s", ".2f", None),
    ("target forwards", "target_forwards", "d", None),
    ("mean accepted length τ (tokens per target forward)", "mean_accepted", ".2f", "tau"),
    ("drafts accepted", "acceptance_rate", ".0%", None),
    ("hit rate (next window ready)", "hit_rate", ".0%", "hit"),
    ("fallbacks (serial redrafts)", "fallbacks", "d", "fallback"),
    ("draft time hidden behind the target", "draft_hidden_fraction", ".0%", None),
    ("draft proposal vocabulary (token ids)", "draft_vocab", "vocab", None),
]


def _metric(stats: dict, key: str, spec: str) -> str:
    if spec == "vocab":  # None: the draft's full head; absent: no draft (AR)
        return ("full" if stats.get(key) is None else f"{stats[key]:,}") if key in stats else "–"
    return _fmt(stats.get(key), spec)


def _greedy_check(records: dict[str, RunRecord], method: str) -> str:
    ar, other = records.get("ar"), records.get(method)
    name = SHORT_NAMES[method]
    if ar is None or other is None or ar.finish is None or other.finish is None:
        return ""
    if not (ar.complete and other.complete):
        return (f'<li class="msd-check c-na">{esc(name)} vs AR: not compared (a run was stopped '
                f'or failed).</li>')
    cmp = compare_tokens(ar.finish.token_ids, other.finish.token_ids)
    if cmp["identical"]:
        return (f'<li class="msd-check c-ok">✓ {esc(name)} output is <b>identical to the '
                f'baseline</b>: {cmp["compared"]} of {cmp["compared"]} tokens match.</li>')
    first = cmp["first"]
    texts_ar, texts_o = analyse(ar).tokens, analyse(other).tokens
    a = esc(repr(texts_ar[first].text)) if first < len(texts_ar) else "(end)"
    b = esc(repr(texts_o[first].text)) if first < len(texts_o) else "(end)"
    return (f'<li class="msd-check c-diff">✗ {esc(name)} differs from the baseline at '
            f'<b>{cmp["mismatches"]}</b> of {cmp["compared"]} positions; first at token '
            f'{first}: AR wrote {a}, {esc(name)} wrote {b}. (fp32 kernels give slightly '
            f'different results for 1 row and several rows, so a near-tie can flip.)</li>')


def _speedups(done: dict[str, RunRecord]) -> dict[str, float]:
    """Decode speed over AR's decode speed (warm runs; prefill apart), per method."""
    ar = measured(done["ar"])["decode_tokens_per_s"] if "ar" in done else None
    out = {}
    for m, rec in done.items():
        tps = measured(rec)["decode_tokens_per_s"]
        if ar and tps:
            out[m] = tps / ar
    return out


def _headline(done: dict[str, RunRecord], speed: dict[str, float]) -> str:
    heads = []
    for m in ("sd", "mirror"):
        if m in speed:
            cls = "up" if speed[m] >= 1 else "down"
            tps = measured(done[m])["decode_tokens_per_s"]
            heads.append(f'<div class="msd-speedup {cls}"><span>{esc(SHORT_NAMES[m])}</span>'
                         f'<b>{speed[m]:.2f}×</b><small>AR\'s decode speed ({tps:.2f} vs '
                         f'{measured(done["ar"])["decode_tokens_per_s"]:.2f} tok/s)</small></div>')
    prefill = [f"{SHORT_NAMES[m]} {measured(done[m])['prefill_s']:.2f} s" for m in METHOD_ORDER
               if m in done and measured(done[m])["prefill_s"] is not None]
    if prefill:
        heads.append(f'<div class="msd-prefill">{term("prefill", "prefill")}, apart: '
                     f'{esc(" · ".join(prefill))}</div>')
    return f'<div class="msd-speedups">{"".join(heads)}</div>'


def render_breakdown(done: dict[str, RunRecord]) -> str:
    """Per run, one bar of its wall time by part (same scale for all), draft hidden beneath."""
    parts = {m: breakdown(done[m]) for m in METHOD_ORDER if m in done}
    parts = {m: p for m, p in parts.items() if p}
    if not parts:
        return ""
    longest = max(sum(p[k] for k in PARTS) for p in parts.values()) or 1.0
    rows = []
    for m, p in parts.items():
        cells = "".join(
            f'<span class="msd-bk b-{k}" style="width:{100 * p[k] / longest:.2f}%" '
            f'title="{esc(PART_NAMES[k])}: {p[k]:.2f} s"></span>' for k in PARTS if p[k] > 0)
        hidden = (f'<span class="msd-bk b-draft_hidden" style="width:{100 * p["draft_hidden"] / longest:.2f}%" '
                  f'title="{esc(PART_NAMES["draft_hidden"])}: {p["draft_hidden"]:.2f} s"></span>'
                  if p["draft_hidden"] > 0 else "")
        text = " · ".join(f"{PART_NAMES[k].split(' (')[0]} {p[k]:.2f}" for k in PARTS + ("draft_hidden",)
                          if p[k] >= 0.005)
        rows.append(f'<div class="msd-bk-row"><span class="msd-bk-name">{esc(SHORT_NAMES[m])}</span>'
                    f'<div class="msd-bk-bars"><div class="msd-bk-bar">{cells}</div>'
                    f'<div class="msd-bk-bar thin">{hidden}</div>'
                    f'<div class="msd-bk-text">{esc(text)} s</div></div></div>')
    key = "".join(f'<span><i class="msd-bk b-{k}"></i>{esc(PART_NAMES[k])}</span>'
                  for k in PARTS + ("draft_hidden",))
    return (f'<div class="msd-breakdown"><div class="msd-sub">Where the time went (from the '
            f'measured spans; bars on one scale, each ends at its run\'s wall time)</div>'
            f'{"".join(rows)}<div class="msd-bk-key">{key}</div></div>')


def render_lanes(done: dict[str, RunRecord]) -> str:
    """The measured per-forward costs, the lanes' contention and the early exit's share."""
    c, lines = costs(done), []
    k = contention(c)
    ms = lambda x: f"{x * 1e3:.0f} ms"  # noqa: E731
    if c.get("target"):
        line = f"one target forward (1 token, AR) {ms(c['target'])}"
        if c.get("draft"):
            line += (f"; one draft forward alone {ms(c['draft'])}, "
                     f"<b>{c['draft'] / c['target']:.0%}</b> of a target forward")
        lines.append(line)
    if k.get("verify"):
        lines.append(f"lanes' contention: the target's verify forward ({c['verify_window'] + 1} tokens) took "
                     f"{ms(c['verify_alone'])} alone (SD) and {ms(c['verify_beside'])} beside the "
                     f"draft (Mirror-SD): <b>{k['verify']:.2f}×</b>")
    if k.get("draft"):
        lines.append(f"one draft forward (a batch of branches) beside the target took "
                     f"{ms(c['draft_beside'])}, {k['draft']:.2f}× its time alone")
    ee = early_exit_share(done.get("mirror"))
    if ee and ee["steps"]:
        lines.append(
            f"{term('early exit', 'exit layer')} at layer {ee['layer']}"
            f"{' through the ' + term('exit lens') if ee.get('lens') else ''}: its top-{ee['kappa']} held "
            f"the target's token in <b>{ee['exit_held']} of {ee['steps']}</b> steps (its top-1 in "
            f"{ee['exit_top1']}); of {ee['hits']} {term('hits', 'hit')}, <b>{ee['hits_from_exit']}</b> "
            f"were rooted in its top-κ and {ee['hits_from_draft']} only in the draft's own guesses")
    if not lines:
        return ""
    return ('<div class="msd-sub">Measured on this run (medians over the steps after the '
            'first)</div><ul class="msd-lanes">' + "".join(f"<li>{x}</li>" for x in lines) + "</ul>")


def render_summary(records: dict[str, RunRecord], settings: dict | None = None,
                   meta: dict | None = None) -> str:
    """Decode speed over AR, why, where the time went, the greedy check, the statistics."""
    settings, meta = settings or {}, meta or {}
    done = {m: records[m] for m in METHOD_ORDER
            if records.get(m) is not None and records[m].finish is not None}
    if not done:
        return '<div class="msd-summary msd-placeholder">The summary appears when the runs end.</div>'
    speed = _speedups(done)
    order = list(done)
    values = {m: {**done[m].finish.stats, **measured(done[m])} for m in order}
    rows = "".join(
        f"<tr><th>{term(label, tip) if tip else esc(label)}</th>" + "".join(
            f"<td>{esc(_metric(values[m], key, spec))}</td>" for m in order) + "</tr>"
        for label, key, spec, tip in METRICS)
    if speed:
        rows += "<tr><th>decode speed over AR</th>" + "".join(
            f"<td>{speed[m]:.2f}×</td>" if m in speed else "<td>–</td>" for m in order) + "</tr>"
    table = (f'<details class="msd-details"><summary>All statistics</summary>'
             f'<table class="msd-table"><thead><tr><th></th>'
             + "".join(f"<th>{esc(SHORT_NAMES[m])}</th>" for m in order)
             + f"</tr></thead><tbody>{rows}</tbody></table></details>")
    checks = ""
    if float(settings.get("temperature", 0.0)) == 0.0:
        checks = "".join(_greedy_check(done, m) for m in ("sd", "mirror"))
    elif len(done) > 1:
        checks = ('<li class="msd-check c-na">Sampling (temperature > 0): each method draws '
                  'its own random numbers, so outputs are different samples of the same '
                  'distribution and are not compared token by token.</li>')
    for m in order:
        if done[m].cancelled:
            checks += f'<li class="msd-check c-na">{esc(SHORT_NAMES[m])} was stopped early.</li>'
    why = why_sentence(done)
    one_cpu = all(str(meta.get(k, "")).startswith("cpu") for k in ("target_device", "draft_device"))
    levers = f'<p class="msd-levers">{esc(LEVERS)}</p>' if one_cpu else ""
    why = f'<p class="msd-why">{esc(why)}</p>{levers}' if why else ""
    cross = cross_sentence(meta)
    why += f'<p class="msd-why msd-cross">{esc(cross)}</p>' if cross else ""
    return (f'<div class="msd-summary">{_headline(done, speed)}{why}'
            f'<ul class="msd-checks">{checks}{_fairness(meta, order)}</ul>'
            f'{render_breakdown(done)}{render_lanes(done)}{table}'
            f'<div class="msd-facts">{_with_terms(esc(_settings_line(settings, meta)))}</div></div>')


def _with_terms(text: str) -> str:
    """The settings line with its symbols defined on hover."""
    for symbol, key in (("γ=", "gamma"), ("κ=", "kappa"), ("exit layer ℓₑ=", "exit layer")):
        text = text.replace(symbol, term(symbol[:-1], key) + "=", 1)
    return text


def _fairness(meta: dict, order: list[str]) -> str:
    """Which weights ran and that every timed run was warm."""
    precision = meta.get("precision")
    if not precision:
        return ""
    names = ", ".join(SHORT_NAMES[m] for m in order)
    dp = meta.get("draft_precision")
    draft = f" (the draft at {dp})" if dp and dp not in ("same", precision) else ""
    warm = meta.get("warmup_s")
    warm = (f" A {warm:.1f} s warm-up of each model ran first, untimed." if warm else
            " Every model had been warmed up before (untimed, when the app started or on an "
            "earlier run), so no timed run pays for a first call." if warm is not None else "")
    return (f'<li class="msd-check c-info">Precision <b>{esc(precision)}</b>{esc(draft)}: '
            f'{esc(names)} all ran the same weights, one after another, each alone on the '
            f'hardware.{esc(warm)}</li>')


def _settings_line(settings: dict, meta: dict) -> str:
    parts = []
    if meta.get("target"):
        parts.append(f"target {meta['target']} ({meta.get('target_layers', '?')} layers, "
                     f"{meta.get('target_device', '?')})")
    if meta.get("draft"):
        parts.append(f"draft {meta['draft']} ({meta.get('draft_device', '?')})")
    if meta.get("precision"):
        dp = meta.get("draft_precision")
        parts.append(f"precision {meta['precision']}"
                     + (f", draft {dp}" if dp and dp not in ("same", meta["precision"]) else ""))
    if settings:
        t = float(settings.get("temperature", 0.0))
        parts.append(f"γ={settings.get('gamma')} κ={settings.get('kappa')} "
                     f"exit layer ℓₑ={meta.get('exit_layer', settings.get('exit_layer'))} "
                     f"branch budget {settings.get('branch_budget')}")
        auto = meta.get("auto")
        if auto:
            sp = auto.get("projected_speedup")
            parts.append(f"γ and budget chosen automatically (projected {sp:.2f}× by the latency "
                         f"model from a {auto.get('probe_s', 0):.1f} s probe: a projection)"
                         if sp is not None else "γ and budget chosen automatically")
        parts.append("greedy" if t == 0 else
                     f"temperature {t:g}, top-p {settings.get('top_p')}, seed {settings.get('seed')}")
        parts.append(f"max {settings.get('max_new_tokens')} new tokens")
    if meta.get("prompt_tokens"):
        parts.append(f"prompt {meta['prompt_tokens']} tokens")
    return " · ".join(parts)
