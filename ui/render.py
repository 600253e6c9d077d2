"""Pure functions from run records to HTML: the token panes, the legend, the summary, status.

Every piece of model or user text goes through `html.escape`; tokens sit in a <pre> with
`white-space: pre-wrap`, so code keeps its indentation and copies out unchanged.
"""
from __future__ import annotations

import html

from .runs import SHORT_NAMES, RunRecord, analyse, compare_tokens, live_stats
from .texts import LEGEND

esc = html.escape


def token_spans(rec: RunRecord) -> str:
    """The committed tokens, one <span> per token, coloured by kind."""
    out = []
    for t in analyse(rec).tokens:
        label = LEGEND.get(t.kind, (t.kind, ""))[0]
        out.append(f'<span class="msd-tok k-{esc(t.kind)}" title="step {t.step} · {esc(label)} '
                   f'· id {t.token_id}">{esc(t.text)}</span>')
    return "".join(out)


def render_legend() -> str:
    items = "".join(
        f'<span class="msd-legend-item" title="{esc(tip)}"><span class="msd-tok k-{kind}">'
        f'{esc(label)}</span></span>' for kind, (label, tip) in LEGEND.items())
    return (f'<div class="msd-legend" role="list" aria-label="token colours">{items}'
            f'<span class="msd-legend-hint">hover a colour or a token for details</span></div>')


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
                    f'<span class="msd-stat"><b>{stats["tokens"]}</b> tokens</span>'
                    f'<span class="msd-stat"><b>{stats["tokens_per_s"]:.2f}</b> tok/s</span>')
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


METRICS = [  # (label, key in Finish.stats, format)
    ("new tokens", "new_tokens", "d"),
    ("wall time (s)", "wall_s", ".2f"),
    ("tokens / s", "tokens_per_s", ".2f"),
    ("target forwards", "target_forwards", "d"),
    ("mean accepted length τ (tokens per target forward)", "mean_accepted", ".2f"),
    ("drafts accepted", "acceptance_rate", ".0%"),
    ("hit rate (next window reused)", "hit_rate", ".0%"),
    ("fallbacks (serial redrafts)", "fallbacks", "d"),
    ("draft time hidden behind the target", "draft_hidden_fraction", ".0%"),
    ("draft proposal vocabulary (token ids)", "draft_vocab", "vocab"),
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


def render_summary(records: dict[str, RunRecord], settings: dict | None = None,
                   meta: dict | None = None) -> str:
    """Speedup over AR, the engine's statistics side by side, and the greedy output check."""
    settings, meta = settings or {}, meta or {}
    done = {m: r for m, r in records.items() if r is not None and r.finish is not None}
    if not done:
        return '<div class="msd-summary msd-placeholder">The summary appears when the runs end.</div>'
    ar = done.get("ar")
    ar_tps = ar.finish.stats["tokens_per_s"] if ar else None
    heads = []
    for m in ("mirror", "sd"):
        if m in done and ar_tps:
            speed = done[m].finish.stats["tokens_per_s"] / ar_tps
            cls = "up" if speed >= 1 else "down"
            heads.append(f'<div class="msd-speedup {cls}"><span>{esc(SHORT_NAMES[m])}</span>'
                         f'<b>{speed:.2f}×</b><small>the speed of AR</small></div>')
    order = [m for m in ("ar", "mirror", "sd") if m in done]
    rows = "".join(
        "<tr><th>" + esc(label) + "</th>" + "".join(
            f"<td>{esc(_metric(done[m].finish.stats, key, spec))}</td>" for m in order) + "</tr>"
        for label, key, spec in METRICS)
    if ar_tps:
        rows += "<tr><th>speedup over AR (tokens/s ÷ AR tokens/s)</th>" + "".join(
            f"<td>{done[m].finish.stats['tokens_per_s'] / ar_tps:.2f}×</td>" for m in order) + "</tr>"
    table = (f'<table class="msd-table"><thead><tr><th></th>'
             + "".join(f"<th>{esc(SHORT_NAMES[m])}</th>" for m in order)
             + f"</tr></thead><tbody>{rows}</tbody></table>")
    checks = ""
    if float(settings.get("temperature", 0.0)) == 0.0:
        checks = "".join(_greedy_check(done, m) for m in ("mirror", "sd"))
    elif len(done) > 1:
        checks = ('<li class="msd-check c-na">Sampling (temperature > 0): each method draws '
                  'its own random numbers, so outputs are different samples of the same '
                  'distribution and are not compared token by token.</li>')
    for m in order:
        if done[m].cancelled:
            checks += f'<li class="msd-check c-na">{esc(SHORT_NAMES[m])} was stopped early.</li>'
    facts = _settings_line(settings, meta)
    return (f'<div class="msd-summary"><div class="msd-speedups">{"".join(heads)}</div>'
            f'<ul class="msd-checks">{checks}</ul>{table}'
            f'<div class="msd-facts">{esc(facts)}</div></div>')


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
