"""The results, from finished runs (pure functions to HTML): the verdict on top, one card per
method, where the time went, and the statistics fold (checks, measured costs, every figure).

Every figure comes from ui/figures.py (one set of definitions, stated there and in the
glossary): a total, a ratio of totals, or a median that says so.
"""
from __future__ import annotations

import html
import re
from statistics import median

from mirror_sd.latency.whatif_hits import shown

from .figures import (ITEM, LEVEL, ONE_RUN, Card, Spread, cards, checked_words, headline, e2e_ranges, exit_bought, windows_bought, lead_words, names_of, overlap_measured, runs_of, shown_run,
                      level_with, machine_words, rounds_ahead, told_apart, ahead_by_little, ahead_words, rounds_said, one_device, speeds, turn_check, verdict_parts, verdict_sub,
                      verify_slowdown, window_words, winner)
from .paircheck import human_name
from .paychart import render_pay_chart
from .render import narrow_fold, term
from .splitchart import LEAD as SPLIT_LEAD, render_split_chart, short_line
from .whatif import figure_words, over_sd_figure, projection_line, range_values, round_span, rounds_span_one
from .runs import (RunRecord, against_ar, analyse, colour, exit_check, exit_mirrors, gated, label, measured,
                   method_names, overlapped_and_gated, variant_of, verdict_outcome)
from .zoom import redraft_ms, render_cause, zoom_record
from .why import (PART_NAMES, PARTS, breakdown, mean_window, per_token, contention, costs, cross_sentence, early_exit_share, lanes_at_once, steps_in_turn,
                  lanes_badge, ran_as_sd, steps_undrafted)

esc = html.escape


def _fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


def finished(records: dict[str, RunRecord]) -> dict[str, RunRecord]:
    """The finished runs in the registry's order."""
    return {m: records[m] for m in method_names()
            if records.get(m) is not None and records[m].finish is not None}


# ---- the verdict ------------------------------------------------------------------------

def _over_sd(projection: dict | None) -> list[float]:
    """Mirror-SD over SD at every projected profile, as the page quotes it (`over_sd_figure`)."""
    return [v for v in (over_sd_figure(projection, k) for k in ((projection or {}).get("over_sd") or {}))
            if v is not None]


def hardware_line(done: dict[str, RunRecord], meta: dict, projection: dict | None) -> str:
    """What Mirror-SD lacks on a machine whose lanes share one device, leading into the chart
    of where it would pay (`paychart`): the projections' figures are the chart's, and the
    takeaway's, never restated here; only why a device of its own for this pair's draft
    (row (b)) can gain more than the accelerator pair (row (c)), where it does."""
    c = costs(done)
    share = (f"{c['draft'] / c['target']:.0%} of a target forward" if c.get("draft") and c.get("target")
             else "a large share of a target forward")
    speeds = {m: done[m].finish.stats.get("tokens_per_s") for m in ("sd", "mirror") if m in done and done[m].finish}
    lost = speeds.get("mirror") is not None and speeds.get("sd") is not None and speeds["mirror"] <= speeds["sd"]
    if "mirror" in done:  # a gate that ran SD's order in most steps showed SD's speed, not Mirror-SD's
        at_once, steps = lanes_at_once(done["mirror"])
        lost = lost or (steps > 0 and 2 * at_once < steps)
    elsewhere = _over_sd(projection)
    gains_elsewhere = not elsewhere or max(elsewhere) > 1  # no projection: the paper's pairs gain
    lost = lost and gains_elsewhere  # "cannot show what it gains" only where the projection shows a gain
    lead = (f"{'This machine cannot show what Mirror-SD gains: ' if lost else 'Here '}both models share "
            f"one machine ({machine_words(meta)}) and its memory bus, and the draft costs {share}.")
    slow = verify_slowdown(done)
    if slow and slow["factor"] > 1.05:  # the cost of overlapping here, the Statistics fold's figure
        lead += (f" With the draft working beside it, the target's verify pass took {slow['factor']:.2f}× "
                 f"its time alone (medians, at one window length: {slow['tokens']} tokens).")
    b, acc = over_sd_figure(projection, "b"), over_sd_figure(projection, "c")
    if b is None and acc is None:
        return (f"{lead} Mirror-SD needs two models that do not share a device and a draft much cheaper "
                f"than the target (the paper pairs a 14-32B target with a ~0.6B draft).")
    why = ""
    if b is not None and acc is not None and b > acc + 0.05:  # (b) above (c): say why, or it reads as a contradiction
        why = (" Mirror-SD gains over SD by hiding the drafting that SD's target waits for behind the "
               "target's own layers: once the draft has a device of its own, this pair's costly draft leaves "
               "much to hide; on the accelerator pair the draft is cheap beside its target, which leaves "
               "less to hide.")
    unsure = any(rounds_span_one(projection or {}, k) for k in ("b", "c"))  # the runs disagree: no claim
    nor = "" if gains_elsewhere or unsure else ": from these steps, no more than SD there either"
    return (f"{lead} The chart shows what the same steps would give where the two models do not share a "
            f"device{nor}.{why}")


def _projected(p: dict, key: str, words: str) -> str:
    """'1.13× SD <words> (the runs shown replayed; the 3 runs' own: 0.97–1.98×)':
    Mirror-SD over SD at profile `key` as the chart and the What-if fold give it
    (`over_sd_figure`), with the interleaved rounds' range ('' without it)."""
    figure = over_sd_figure(p, key)
    if figure is None:
        return ""
    values = range_values(p, key)
    either = ", inconclusive" if rounds_span_one(p, key) else ""
    spread = (f" ({figure_words(p, key)}; the {len(round_span(p, key))} runs' own: "
              f"{min(values):.2f}–{max(values):.2f}×{either})" if values else "")
    return f"{figure:.2f}× SD {words}{spread}"


def _against_sd(m: str, c: dict[str, Card], sp: dict, spreads: dict | None) -> str:
    """' 1.32× SD end to end: these runs cannot tell it from SD' and the like ('' without both speeds)."""
    if not sp.get(m, (None,))[0] or not sp["sd"][0]:
        return ""
    pair = {"sd": c["sd"], m: c[m]}
    level = level_with(pair, winner(pair, spreads), spreads)
    ratio = sp[m][0] / sp["sd"][0]
    said = ("these runs cannot tell it from SD" if level else
            "overlapping paid even on these shared cores" if ratio > 1 else
            "sharing the cores cost more than its hits saved")
    return f"{ratio:.2f}× SD end to end: {said}"


def late_hits_words(rec: RunRecord | None) -> str:
    """' Its branches hit 9 verdicts, but sharing the cores the draft finished 8 of those branches
    after the verdict, a median 189 ms late; a window drafted fresh after a verdict took 54 ms
    (median).': why a hit saves little here, from the run's own steps ('' without a late hit)."""
    if rec is None:
        return ""
    steps = analyse(rec).steps
    hits = [sv for sv in steps.values() if verdict_outcome(sv) == "hit"]
    late = [sv.late_ms for sv in hits if sv.late_ms]
    if not late:
        return ""
    fresh = redraft_ms(rec)  # None from fewer than FRESH_MIN fresh windows
    which = (("that branch" if len(hits) == 1 else f"all {len(hits)} of those branches") if len(late) == len(hits)
             else f"{len(late)} of those branches")
    return (f" Its branches hit {len(hits)} verdict{'' if len(hits) == 1 else 's'}, but sharing the cores the "
            f"draft finished {which} after the verdict, a median {median(late):.0f} ms late"
            + (f"; a window drafted fresh after a verdict took {fresh:.0f} ms (median)" if fresh else "") + ".")


def _mirror_takeaway(c: dict[str, Card], sp: dict, spreads: dict | None,
                     done: dict[str, RunRecord]) -> list[tuple[str, str]]:
    """(lead, text) items, one per Mirror-SD run with its early exit: how often its lanes ran at
    once and its speed against SD; for a gated run that ran in turn, what its gate chose and why;
    where hits came after the verdict, how late (`late_hits_words`); the gated run's speed against
    the one overlapped in every step, where both ran."""
    items = []
    for m in exit_mirrors(c):
        rec = done.get(m)
        if rec is None:
            continue
        at_once, steps = lanes_at_once(rec)
        if not steps:
            continue
        vs = _against_sd(m, c, sp, spreads)
        if at_once * 2 >= steps:
            every = f"in all {steps} of its steps" if at_once == steps else f"in {at_once} of its {steps} steps"
            items.append((label(m), f"Its draft wrote beside the target {every}" + (
                f", {vs}." if vs else ".") + late_hits_words(rec)))
            continue
        decoded = steps_undrafted(rec)
        if 2 * decoded >= steps:  # mostly a plain decode: the priced windows judged drafting not worth it
            sd = c.get("sd")
            theirs = (f" SD, pricing its own steps, drafted a window in {sd.verify_steps - sd.undrafted} of its "
                      f"{sd.verify_steps}." if sd is not None and sd.verify_steps else "")
            text = (f"It drafted nothing in {decoded} of its {steps} steps, each a plain target decode: its windows "
                    f"are priced from the costs it measures as it runs, and those prices judged drafting not worth "
                    f"it.{theirs}")
        else:
            turns = steps_in_turn(rec)
            beside = f", the draft beside the target in {at_once}" if at_once else ""
            how = (f"in all {turns} of its steps that drafted a next window" if turns == steps - 1 else
                   f"in {turns} of its {steps} steps{beside} (the last had no next window to draft)")
            text = (f"Its gate ran it as SD (the draft, then the target) {how}: timing both orders as it runs, "
                    f"it found taking turns the faster on these shared cores, and taking turns it prices its "
                    f"windows from SD's measured costs.")
        items.append((label(m), text + (f" It ran {vs}." if vs else "")))
    overlapped, gate = overlapped_and_gated(c)
    if overlapped and gate and sp[overlapped][0] and sp[gate][0]:
        pair = {gate: c[gate], overlapped: c[overlapped]}
        if not level_with(pair, winner(pair, spreads), spreads):
            paid = sp[overlapped][0] > sp[gate][0]
            items.append((f"{label(overlapped)} against {label(gate)}",
                          "Overlapping every step beat the gate here." if paid else
                          "The gate's choice paid here: overlapping every step was slower."))
    return items


def _split_doubt(c: dict[str, Card], spreads: dict | None, runs: int) -> str:
    """' These 3 runs cannot tell Mirror-SD (gated) from SD: ...': where the interleaved runs
    cannot tell a Mirror-SD from SD (neither faster in every round), the seconds chart's parts are where
    the runs shown spent their time, not a proven cause ('' otherwise, or from one run)."""
    ranges = e2e_ranges(spreads)
    if runs < 2 or "sd" not in ranges:
        return ""
    tied = [m for m in _mirrors(c) if m in ranges and not told_apart(spreads, m, "sd")
            and not told_apart(spreads, "sd", m)]
    if not tied:
        return ""
    return (f" These {runs} runs cannot tell {names_of(tied)} from SD: the parts show "
            f"where the runs shown spent their time, not a proven cause.")


def takeaway(done: dict[str, RunRecord], spreads: dict | None = None, projection: dict | None = None) -> str:
    """The run in a few plain sentences (`takeaway_parts`, joined)."""
    return " ".join(text for _, text in takeaway_parts(done, spreads, projection))


def takeaway_parts(done: dict[str, RunRecord], spreads: dict | None = None,
                   projection: dict | None = None) -> list[tuple[str, str]]:
    """The run in plain sentences before any figure, each under a short lead: whether
    speculation (SD) beat plain decoding here, proven by the interleaved runs or not; what the
    gated Mirror-SD did and why; where its overlap would pay, as a projection ([] without AR
    and SD)."""
    c = cards(done)
    if not {"ar", "sd"} <= set(c) or winner(c, spreads) is None:
        return []
    sp, ranges, runs = speeds(c, spreads), e2e_ranges(spreads), runs_of(spreads)
    sd = sp["sd"][1]
    if sd is None:
        return []
    if runs > 1 and "sd" in ranges and "ar" in ranges:
        got = rounds_ahead(spreads, "sd", "ar")
        if told_apart(spreads, "sd", "ar"):
            first = f"Speculative decoding (SD) beat plain decoding in all {runs} rounds: {sd:.2f}× AR"
        elif told_apart(spreads, "ar", "sd"):
            first = f"Speculative decoding (SD) lost to plain decoding in all {runs} rounds: {sd:.2f}× AR"
        elif got:
            first = (f"Speculative decoding (SD) ran {sd:.2f}× plain decoding (AR), but it was faster in "
                     f"only {got[0]} of the {got[1]} rounds: not proven")
        else:
            first = (f"Speculative decoding (SD) ran {sd:.2f}× plain decoding (AR), but that is not "
                     f"proven: the two methods' ranges over the {runs} runs overlap")
    else:
        first = (f"Speculative decoding (SD) ran {sd:.2f}× plain decoding (AR) in one run"
                 + (", within one run's noise" if abs(sd - 1) < ONE_RUN else ""))
    parts = [("SD against plain decoding", first + ".")]
    parts += _mirror_takeaway(c, sp, spreads, done)
    # each Mirror-SD's time against SD's in one line; the chart in its item splits it into parts
    if split := short_line(c, done, _mirrors(c)):
        parts.append((SPLIT_LEAD, split + _split_doubt(c, spreads, runs)))
    p = projection or {}
    where = [w for w in (_projected(p, "b", "with the draft on a device of its own"),
                         _projected(p, "c", "on an accelerator pair")) if w]
    if where and "mirror" in done:
        # over interleaved runs, the runs shown's steps projected (each run's own: the range); else the run's own
        n = max(len(round_span(p, k)) for k in ("b", "c"))
        steps = "the steps of the runs shown" if n else f"the steps of {shown_run(spreads)}"
        if max(_over_sd(p)) < 1:  # no profile passes SD: the lead asks, and the text answers no
            parts.append(("Would Mirror-SD pay elsewhere?",
                          f"Not from {steps}: projected, not measured (the chart below), Mirror-SD "
                          f"{'; '.join(where)}."))
        else:
            parts.append(("Projected on other hardware",
                          f"Projected, not measured (the chart below, from {steps}): "
                          f"Mirror-SD {'; '.join(where)}."))
    return parts


def _mirrors(c: dict[str, Card]) -> list[str]:
    """The Mirror-SD methods among the cards, in their order."""
    return [m for m in c if variant_of(m)[0] == "mirror"]


def takeaway_items(short: list[tuple[str, str]], charts: dict[str, str] | None = None) -> str:
    """The takeaway's parts as list items, each under its lead (a question keeps its mark), an
    item's chart (`charts`, by lead: HTML) under its words."""
    charts = charts or {}
    return "".join(f'<li><b>{esc(lead)}{"" if lead.endswith("?") else ":"}</b> {esc(text)}'
                   f'{charts.get(lead, "")}</li>' for lead, text in short)


def lead_why(done: dict[str, RunRecord], meta: dict, projection: dict | None,
             spreads: dict | None = None) -> str:
    """The line under the lead where Mirror-SD was not faster than SD (medians): why, in the
    ledger's terms (`ledger_cause`), then, where the draft on a device of its own would pass SD
    (the projection's runs shown replayed above 1× and every round's on the same side), that
    figure, labelled projected; '' where Mirror-SD was faster or a run is missing."""
    c = cards(done)
    sp = speeds(c, spreads)
    if not ("sd" in c and "mirror" in c and sp["sd"][0] and sp["mirror"][0]) or sp["mirror"][0] > sp["sd"][0]:
        return ""
    said = [ledger_cause(done, meta)]
    b = over_sd_figure(projection or {}, "b")
    if one_device(meta) and b is not None and shown(b) > 1 and not rounds_span_one(projection, "b"):
        said.append(f"With the draft on a device of its own these steps would give {b:.2f}× SD "
                    f"(projected, not measured).")
    return " ".join(x for x in said if x)


MORE_SUMMARY = ("In short, point by point: each method against plain decoding and SD, second by second, "
                "what this machine cannot show, and the projection's inputs")


LEDGER_PARTS = (("forwards", "b-verify", "verify (AR: its target forward)"),
                ("waiting", "b-draft_exposed", "the target waits for the draft"),
                ("idle", "b-idle", "idle (no model busy)"))


def _ms(x: float) -> str:
    """Milliseconds as the ledger says them: whole ms, a tenth below 10 ms."""
    return f"{x:.1f}" if abs(x) < 9.95 else f"{x:.0f}"


def ledger_terms(rec: RunRecord) -> dict | None:
    """`why.per_token` over a token: each part of a step (forwards, waiting, idle, hidden) over
    the tokens a step wrote, so that forwards + waiting + idle is the run's decode ms a token."""
    t = per_token(rec)
    if t is None:
        return None
    n = t["tokens_per_step"]
    return {**{k: t[k] / n for k in ("forwards", "waiting", "idle", "hidden")}, "step": t}


def render_ledger(done: dict[str, RunRecord], runs: int = 1) -> str:
    """Each method's time per token after the first as one stacked bar on one scale: its verify
    (AR: its target forward), the time the target waited for the draft and any idle time, each
    over the tokens a step wrote (`ledger_terms`; the parts add up to the run's decode time per
    token), with the sum in words and a step's arithmetic. Where the drafting's cost and the
    tokens it buys meet, in this run's own figures ('' without AR and one drafting method)."""
    terms = {m: t for m, rec in done.items() if (t := ledger_terms(rec)) is not None}
    if len(terms) < 2 or "ar" not in terms:
        return ""
    top = max(t["step"]["per_token"] for t in terms.values())
    rows = []
    for m, t in terms.items():
        plain, step = variant_of(m)[0] == "ar", t["step"]
        bars = "".join(f'<i class="{cls}" style="width:{100 * t[k] / top:.1f}%" title="{esc(words)}: {t[k]:.1f} ms a token"></i>'
                       for k, cls, words in LEDGER_PARTS if t[k] > 0)
        # a part under 1 ms beside whole ms reads as "<1", so the rounded parts read as the total
        whole = step["per_token"] >= 9.95
        sum_ = " + ".join(f"{name} {('<1' if t[k] < 1 else f'{t[k]:.0f}') if whole else _ms(t[k])}"
                          for k, name in (("forwards", "target forward" if plain else "verify"),
                                          ("waiting", "waiting"), ("idle", "idle"))
                          if k == "forwards" or t[k] >= 0.05)  # what rounds to 0.0 ms is left out
        window = mean_window(done[m])
        per_step = "" if plain else (
            f"a step after the first: {step['forwards'] + step['waiting'] + step['idle']:.0f} ms for "
            f"{step['tokens_per_step']:.2f} tokens" + (f", {window:.1f} drafted on average" if window is not None else ""))
        hidden = (f"; its draft also worked {_ms(t['hidden'])} ms a token beside the target, hidden"
                  if t["hidden"] >= 0.05 * step["per_token"] else "")
        rows.append(f'<li data-ledger="{esc(m)}"><span class="msd-ledger-name"><i class="msd-ledger-key" '
                    f'style="background:{colour(m)}"></i><b>{esc(label(m))}</b></span>'
                    f'<span class="msd-ledger-track">{bars}</span>'
                    f'<span class="msd-ledger-sum">{esc(sum_)} = <b>{_ms(step["per_token"])} ms a token</b>'
                    f'<span class="msd-ledger-step">{esc(per_step)}{esc(hidden)}</span></span></li>')
    which = f"each method's middle run of {runs}" if runs > 1 else "this run"
    key = "".join(f'<span><i class="{cls}"></i>{esc(words)}</span>' for _, cls, words in LEDGER_PARTS)
    tip = ("Means over each run's steps after the first; the parts add up to its decode time per token, "
           "so they can differ from the medians and whole-run counts in Statistics")
    return (f'<div class="msd-ledger" title="{esc(tip)}"><div class="msd-sub">Where each token\'s time went '
            f'after the first ({which}; ms a token, shorter is faster)</div>'
            f'<ul>{"".join(rows)}</ul><div class="msd-bk-key">{key}</div></div>')


def ledger_cause(done: dict[str, RunRecord], meta: dict) -> str:
    """Why Mirror-SD's tokens cost more than SD's, from the ledger's own terms (`ledger_terms`):
    the part that grew most a token, said with both figures, and what hiding the draft did to the
    waiting; '' where Mirror-SD's decode was not slower a token or a run is missing."""
    t = {m: ledger_terms(done[m]) if m in done else None for m in ("sd", "mirror")}
    if None in t.values():
        return ""
    sd, mi = t["sd"], t["mirror"]
    if mi["step"]["per_token"] <= sd["step"]["per_token"]:
        return ""
    grew = max(("forwards", "waiting", "idle"), key=lambda k: mi[k] - sd[k])
    if grew == "forwards":
        beside = ", its target working beside the draft on the same cores" if one_device(meta) else ""
        said = f"verifying cost Mirror-SD {_ms(mi['forwards'])} ms a token against SD's {_ms(sd['forwards'])}{beside}"
        saved = sd["waiting"] - mi["waiting"]
        said += (f"; hiding its draft saved {_ms(saved)} ms a token of waiting" if saved >= 0.05 * sd["waiting"] else
                 f"; hiding its draft saved no waiting ({_ms(mi['waiting'])} against SD's {_ms(sd['waiting'])} ms a token)")
    elif grew == "waiting":
        said = (f"its target waited for the draft {_ms(mi['waiting'])} ms a token against SD's {_ms(sd['waiting'])}: "
                f"the draft was too slow to hide behind the target")
    else:
        said = f"idle time cost Mirror-SD {_ms(mi['idle'])} ms a token against SD's {_ms(sd['idle'])}"
    return f"Why: {said}."


def _one_run_note(spreads: dict | None) -> str:
    """Under the lead of a single run (the presenter view): that its figures are one timing
    each, anecdotal, and where the interleaved runs are ('' over several runs)."""
    if runs_of(spreads) > 1:
        return ""
    return (f'<p class="msd-one-run"><span class="msd-proj-tag">one run</span> One timing of each method, '
            f'an anecdote: here a whole run can be {ONE_RUN:.0%} or more off the next run of the same method. '
            f'For medians and ranges, time 3 interleaved runs of each method (“Runs per method”, outside '
            f'the presenter view): the page then says when they cannot tell two methods apart.</p>')


def render_verdict(records: dict[str, RunRecord], meta: dict, projection: dict | None = None,
                   spreads: dict | None = None) -> str:
    """The verdict sentence, the hardware and its consequence in large type, the projection."""
    done = finished(records)
    c = cards(done)
    head, reason = verdict_parts(c, done, meta, spreads)
    if not head:
        return ""
    short = takeaway_parts(done, spreads, projection)
    items = takeaway_items(short, {SPLIT_LEAD: render_split_chart(c, done, _mirrors(c))})
    # the headline and the tiles first, the plain takeaway under them; the decode ratios and
    # how the lanes shared the machine go to Statistics (`render_statistics`)
    big, rest = headline(c, done, meta, spreads)  # the same words as `head`, the large type's first
    # for an audience: one plain sentence and one picture (the cause, in one step), then the figures
    # and the measured-against-projected bars; the takeaway and the reason's pictures one click away
    k = costs(done)
    lead = lead_words(c, done, meta, spreads, "",
                      k["draft"] / k["target"] if k.get("draft") and k.get("target") else None)
    why = lead_why(done, meta, projection, spreads) if lead else ""
    # the lead, why in the ledger's terms and the ledger's bars (one diagnosis, one picture), the
    # same cause in one step, then the ratios, the tiles and the measured-against-projected bars
    parts = [f'<p class="msd-lead">{esc(lead)}</p>' if lead else "",
             f'<p class="msd-lead-why">{esc(why)}</p>' if why else "", _one_run_note(spreads) if lead else "",
             render_ledger(done, runs_of(spreads)),
             render_cause(zoom_record(done), meta) if "mirror" in c else "",
             f'<p class="msd-verdict-text">{esc(big)}</p>'
             + (f'<p class="msd-verdict-tell">{esc(rest.strip())}</p>' if rest.strip() else ""),
             _scoreboard(c, spreads, done),
             render_pay_chart(projection, c, spreads) if "mirror" in c else ""]
    more = [f'<div class="msd-takeaway"><b>In short</b><ul>{items}</ul></div>' if short else ""]
    # what this machine cannot show and where Mirror-SD would pay, then the measured trade
    if one_device(meta) and "mirror" in c:
        more.append(f'<p class="msd-hardware">{esc(hardware_line(done, meta, projection))}</p>')
    if projection:  # the What-if fold's row (c) in one line, its inputs named
        more.append(projection_line(projection, series=False))
    if reason:  # the reason's words and arithmetic: Statistics (the takeaway says it in seconds)
        more.append(_picture(done))
    for bought, css in ((exit_bought(c, done, spreads), "msd-exit-bought"),
                        (windows_bought(c, done, spreads), "msd-windows-bought")):
        if bought:
            lead, text = bought
            more.append(f'<p class="msd-verdict-why {css}"><b>{esc(lead)}:</b>{esc(text)}</p>')
    if any(more):
        parts.append(f'<details class="msd-more"><summary>{esc(MORE_SUMMARY)}</summary>{"".join(more)}</details>')
    return f'<div class="msd-verdict">{"".join(parts)}</div>'


def reason_items(records: dict[str, RunRecord], meta: dict, runs: int = 1, spreads: dict | None = None) -> str:
    """The verdict's reason in full, one item per line (the Statistics fold), with the
    verdict's own lead (`spreads` as the verdict had them)."""
    done = finished(records)
    head, reason = verdict_parts(cards(done), done, meta, spreads)
    if not reason:
        return ""
    lead, *items = [x.strip() for x in reason.strip().split(ITEM)]
    lines = [f"<b>{esc(lead)}</b> {esc(items[0])}" if items else esc(lead)] + [esc(x) for x in items[1:]]
    which = f" (the runs shown: each method's middle run of {runs}, as the cards' other rows)" if runs > 1 else ""
    return (f'<div class="msd-sub">The verdict\'s arithmetic{which}</div><ul class="msd-verdict-why">'
            + "".join(f"<li>{x}</li>" for x in lines) + "</ul>")


def _bar(value: float, top: float, cls: str, text: str) -> str:
    width = 100 * value / top if top > 0 else 0
    return f'<span class="msd-vbar {cls}" style="width:{width:.1f}%" title="{esc(text)}"></span>'


def _picture(done: dict[str, RunRecord]) -> str:
    """Two small pictures beside the reason: one verify forward alone (SD) against beside the
    draft (Mirror-SD), and the drafting the target waited for against the drafting hidden."""
    if not {"sd", "mirror"} <= set(done):
        return ""
    parts = {m: breakdown(done[m]) or {} for m in ("sd", "mirror")}
    slow = verify_slowdown(done)
    rows = []
    if slow and _verify_tells(slow):  # else the steps could not tell alone from beside: no picture
        top = max(slow["alone_all"][-1], slow["beside_all"][-1])
        who = _beside_words(slow)
        rows.append((_verify_title(slow), [
            ("SD", _bar(slow["alone_s"], top, "b-verify", "alone"), "alone: " + _ms_spread(slow["alone_all"])),
            (label(slow["method"]), _bar(slow["beside_s"], top, "b-verify", who),
             f"{who}: " + _ms_spread(slow["beside_all"]))]))
    draft = {m: (parts[m].get("draft_exposed") or 0.0, parts[m].get("draft_hidden") or 0.0) for m in parts}
    top = max(sum(v) for v in draft.values())
    if top > 0:
        rows.append(("drafting, after the first token", [
            (label(m), _bar(draft[m][0], top, "b-draft_exposed", "the target waits")
             + _bar(draft[m][1], top, "b-draft_hidden", "hidden beside the target"),
             f"target waits {draft[m][0]:.2f} s" + (f", hidden {draft[m][1]:.2f} s" if draft[m][1] else ""))
            for m in ("sd", "mirror")]))
    body = "".join(
        f'<div class="msd-vpic-part"><div class="msd-vpic-title">{esc(title)}</div>' + "".join(
            f'<div class="msd-vpic-row"><span class="msd-vpic-name">{esc(name)}</span>'
            f'<span class="msd-vpic-track">{bars}</span><span class="msd-vpic-text">{esc(text)}</span></div>'
            for name, bars, text in lines) + "</div>"
        for title, lines in rows)
    return f'<div class="msd-vpic">{body}</div>{windows_note(cards(done))}' if body else ""


def windows_note(c: dict[str, Card]) -> str:
    """Where SD's and Mirror-SD's windows differ on median, why: steps in turn price windows
    from the same measured costs (the engine's), and overlapped steps price drafting at what
    the target waited for it, so their windows differ by more than the overlap."""
    sd, mirror = c.get("sd"), c.get("mirror")
    if not (sd and mirror and sd.windows and mirror.windows) or sd.windows[1] == mirror.windows[1]:
        return ""
    overlapped = (mirror.hits or 0) + (mirror.misses or 0)
    many = overlapped != 1
    why = (f"Steps in turn price their windows from the same measured costs, which move with the machine "
           f"between runs; Mirror-SD's {overlapped} overlapped step{'s' if many else ''} price{'' if many else 's'} "
           f"drafting at what the target waited for it (near nothing where a branch was ready)."
           if overlapped else
           "Both price their windows from the same measured costs, which moved with the machine's speed "
           "and the text between the two runs.")
    return (f'<p class="msd-verdict-note">Not the same windows: SD drafted {window_words(sd)} tokens a window, '
            f'Mirror-SD {window_words(mirror)}. {why}</p>')


def _ms_spread(values: list[float]) -> str:
    """'150 ms (4 steps, 140–171)': the median over the steps, their count and range."""
    mid = median(values)
    steps = f"{len(values)} step{'s' if len(values) != 1 else ''}"
    span = f", {values[0] * 1e3:.0f}–{values[-1] * 1e3:.0f}" if len(values) > 1 else ""
    return f"{mid * 1e3:.0f} ms ({steps}{span})"


def _verify_tells(slow: dict) -> bool:
    """Whether the verify steps can say anything of alone against beside: most of Mirror-SD's
    ran with the draft beside the target, and each side has at least three steps."""
    n, k = len(slow["beside_all"]), slow.get("at_once", len(slow["beside_all"]))
    return 2 * k >= n and min(len(slow["alone_all"]), n) >= 3


def _beside_words(slow: dict) -> str:
    """What Mirror-SD's steps in the verify picture were: the draft beside the target, or how
    many of them."""
    n, k = len(slow["beside_all"]), slow.get("at_once", len(slow["beside_all"]))
    return "beside the draft" if k == n else f"{k} of {n} beside"


def _verify_title(slow: dict) -> str:
    """The verify picture's title: its window, its statistic, and whether its steps can tell
    the two apart."""
    title = f"one verify forward of {slow['tokens']} tokens, median over the steps"
    if slow["overlap"]:
        return title + ": the ranges overlap, so these steps cannot tell alone from beside"
    return title + f": beside the draft {slow['factor']:.2f}× as long"


def tie_words(runs: int, top: str) -> str:
    """The badge of a method the runs cannot tell from the winner (`top`, named: the badge says
    whom it ties, so that it never reads as a tie with every other method): short, to fit on a tile."""
    return f"within noise of {top}" if runs > 1 else f"within {ONE_RUN:.0%} of {top}"


def standing(c: dict[str, Card], spreads: dict | None = None) -> dict[str, tuple[str, str]]:
    """Each tile's badge as (text, hover), the same kind of words on every tile, all measured
    against the winner (the best end-to-end median): the winner "fastest" when clear of the
    rest, else "fastest median, a tie"; every other method "within noise of SD" (from one
    run: "within 10% of SD") when the runs cannot tell it from the winner (`level_with`),
    else "slower than the fastest" (AR: "baseline"), the winner named in the hover."""
    best = winner(c, spreads)
    if best is None:
        return {}
    level, runs, top = level_with(c, best, spreads), runs_of(spreads), label(best)
    apart = "their ranges overlap" if runs > 1 else f"within {ONE_RUN:.0%}, about one run's noise here"
    out = {best: ("fastest median, a tie" if level and runs > 1 else "fastest, a tie" if level else "fastest",
                  f"the best end-to-end speed; the runs cannot tell it from "
                  f"{', '.join(label(m) for m in level[1:])} ({apart})" if level else
                  "the best end-to-end speed, clear of every other method")}
    said = dict(zip(level[1:], rounds_said(spreads, level))) if level and runs > 1 else {}
    for m in c:
        if m == best:
            continue
        why = said.get(m) or apart
        if m == "ar":  # the baseline is never badged a tie: the headline and the hover say it
            out[m] = ("baseline", "the target alone, what the others are measured against; " + (
                f"the runs cannot tell {top} from it ({why})" if m in level else f"clearly slower than {top} end to end"))
        else:
            out[m] = ((tie_words(runs, top), f"the runs cannot tell {label(m)} from {top} ({why})") if m in level else
                      ("slower than the fastest", f"clearly slower than {top} end to end"
                                                  + (f" ({w})" if (w := ahead_words(spreads, best, m)) else "")))
    return out


OUTLIER = 0.3  # a run this far off its method's median is flagged on its tile


def _scoreboard(c: dict[str, Card], spreads: dict | None = None, done: dict | None = None) -> str:
    """One tile per method: its own end-to-end tok/s in large type and its ratio over AR in
    words under it (the medians over interleaved runs when there were several), the same
    figures as the verdict's sentence and the cards' "end to end" rows; a badge on every tile
    saying where it stands against the winner (`standing`), with a legend beside."""
    if "ar" not in c or len(c) < 2:
        return ""
    best = winner(c, spreads)
    badges = standing(c, spreads)
    sp = speeds(c, spreads)
    tiles = []
    for m in c:
        tps, ratio = sp[m][0], sp[m][1]
        small = ("plain decoding: the baseline" if m == "ar" else
                 "–" if ratio is None else f"{ratio:.2f}× AR's speed")
        text, tip = badges.get(m, ("", ""))
        if m == best and text and ran_as_sd(m, (done or {}).get(m)):  # the top, but not by overlapping:
            # no "fastest" on a Mirror-SD that worked as SD did
            text, tip = ("ran as SD, a tie" if level_with(c, best, spreads) else "ran as SD, top speed",
                         f"{tip}; its gate ran it as SD (the draft, then the target) in most steps, so its "
                         f"speed is SD's way of working, not the overlap's")
        behind = " is-behind" if text.startswith("behind ") else ""
        flag = f' <span class="msd-tile-best{behind}" title="{esc(tip)}">{esc(text)}</span>' if text else ""
        r = e2e_ranges(spreads).get(m)
        # a run far off the median (the machine busy with something else, say) is named as such:
        # it widens the range that decides whether two methods can be told apart
        odd = (f' <span class="msd-tile-odd" title="a run {OUTLIER:.0%} or more off the median: a rerun '
               f'shows whether it was the machine">· one run far off</span>'
               if r and (r.low < r.median * (1 - OUTLIER) or r.high > r.median * (1 + OUTLIER)) else "")
        span = (f'<div class="msd-tile-range">its {runs_of(spreads)} runs: {r.low:.2f}–{r.high:.2f} tok/s{odd}</div>'
                if r else "")
        if m != best and (got := rounds_ahead(spreads, best, m)):  # the paired comparison, in a line
            under = f", by under {LEVEL:.0%} (medians)" if ahead_by_little(spreads, best, m) else ""
            span += (f'<div class="msd-tile-range msd-tile-rounds">slower than {esc(label(best))} in '
                     f'{f"all {got[1]}" if got[0] == got[1] else f"{got[0]} of {got[1]}"} rounds{under}</div>')
        gate = lanes_badge(m, done[m]) if m in (done or {}) else ""
        span += f'<div class="msd-tile-gate">{esc(gate)}</div>' if gate else ""
        tiles.append(f'<div class="msd-tile{" best" if m == best else ""}" data-method="{esc(m)}" '
                     f'style="border-color:{esc(colour(m))}"><div class="msd-tile-name" '
                     f'style="color:{esc(colour(m))}">{esc(label(m))}{flag}</div>'
                     f'<div class="msd-tile-big">{_fmt(tps)} tok/s</div>'
                     f'<div class="msd-tile-small">{esc(small)}</div>{span}</div>')
    runs = runs_of(spreads)
    many = f", medians of {runs} interleaved runs" if runs > 1 else ", this run"
    ties = best is not None and tie_words(runs, label(best)) in [text for text, _ in badges.values()]
    legend = ""
    if ties:
        top = esc(label(best))
        how = (f"{top} was not faster in every round" if runs > 1 else "one run's noise here is about that much")
        legend = (f'<br>“{esc(tie_words(runs, label(best)))}”: {how}, so '
                  f'{"these runs cannot" if runs > 1 else "one run cannot"} tell the two apart')
    if any(gated(m) for m in c):  # the gated Mirror-SD's name, once
        legend += ("<br>“gated”: Mirror-SD picks, step by step from the times it measures, whether the draft "
                   "writes beside the target or first, as in SD")
    return (f'<div class="msd-scoreboard">{"".join(tiles)}'
            f'<div class="msd-tile-note">{term("end to end", "e2e")}{many}, '
            f'this machine{legend}</div></div>')


# ---- the cards ----------------------------------------------------------------------------

def _val(own: float | None, s: Spread | None, spec: str, unit: str = "", shown: bool = False) -> str:
    """A card's figure: this run's; over interleaved runs, with the range beside it in small
    type, and the figure the run shown's (`shown`: each method's middle run, the race's, so that
    a card, its pane and the What-if fold give one figure) or else the runs' median."""
    if s is None or s.n < 2:
        return f"{_fmt(own, spec)}{unit}"
    value, what = (own, "the run shown; range") if shown and own is not None else (s.median, "median and range")
    return (f'{format(value, spec)}{unit} <small class="msd-range" title="{what} '
            f'over {s.n} interleaved runs">[{format(s.low, spec)}–{format(s.high, spec)}]</small>')


def _card_rows(c: Card, s: dict, ratios: tuple | None = None, shown: bool = False) -> list[tuple[str, str, str]]:
    """(label, value, glossary key) rows of one card; `ratios`: (end to end, decode) over AR as
    `speeds` gives them (the speeds shown divided by AR's), else this run's; `shown`: the
    figures are the run shown's, with the rounds' ranges (`_val`)."""
    x = lambda v: "–" if v is None else f"{v:.2f}×"  # noqa: E731
    e2e_x, decode_x = ratios or (c.e2e_speedup, c.decode_speedup)
    rows = [("time to first token", _val(c.ttft_s, s.get("ttft_s"), ".2f", " s", shown), "ttft"),
            ("decode speed", _val(c.decode_tps, s.get("decode_tps"), ".2f", " tok/s", shown), "decode"),
            ("end to end", _val(c.e2e_tps, s.get("e2e_tps"), ".2f", " tok/s", shown)
             + ("" if "e2e_tps" in s and s["e2e_tps"].n > 1 else f" ({c.tokens} tokens in {c.wall_s:.2f} s)"), "e2e")]
    if c.method != "ar" and decode_x is not None:
        rows.append(("over AR, decode / end to end",
                     f"<b>{x(decode_x)}</b> / <b>{x(e2e_x)}</b>", "speedup"))
    if c.verify_steps:
        none = (f'; <span title="a window of none: a plain target forward for one token">{c.undrafted} drafted '
                f'nothing</span>' if c.undrafted else "")
        rows.append(("target forwards (verify steps)", f'{c.verify_steps}, <span title="{c.tokens} tokens / '
                     f'{c.verify_steps} target forwards">{c.tokens_per_step:.1f} tokens each</span>{none}',
                     "verify step"))
    if c.windows:
        lo, mid, hi = c.windows
        rows.append(("drafted tokens per window", f"{lo} / {mid:g} / {hi} (min / median / max)", "window"))
        rows.append(("rejections", f"{c.rejections} of {c.verify_steps} steps", "rejection"))
    if c.hits is not None:
        turn = f" · lanes in turn: {c.in_turn}" if c.in_turn else ""  # the steps neither hit nor missed
        checked = None
        if c.in_turn and c.turns:  # the exit check, after the run: its words count every step in turn
            t = c.turns
            seen = t["hits"] + t["misses"] + t["checked"]
            rate = (f' · <span title="measured hits and the checked steps that would have hit, over every step '
                    f'either counts: the hit rate the What-if projections use">the projections\' hit rate: '
                    f'{t["hits"] + t["would_hit"]} of {seen} (timed hits and would-have-hits), {t["rate"]:.0%}</span>'
                    if t["rate"] is not None and seen else "")
            turn = f" · {c.in_turn} step{'' if c.in_turn == 1 else 's'} in turn (next row)"
            checked = f"{esc(checked_words(t))}{rate}"
        # the last step drafts no next window: neither hit, miss nor in turn, and said so, so
        # that the counts add up to the verify steps
        last = " · the last step: no next window" if c.hits + c.misses + c.in_turn == c.verify_steps - 1 else ""
        late = f" ({c.late} late)" if c.late else ""  # of the hits: their branch ready after the verdict
        rows.append(("hits / misses", f"{c.hits}{late} / {c.misses}{turn}{last}", "hit"))
        if checked:  # apart from the timed count: read after the run, untimed
            rows.append(("in turn, checked after the run", checked, "hit"))
    if c.draft_exposed_s is not None:
        rows.append(("draft time exposed / hidden", f"{c.draft_exposed_s:.2f} s / "
                     f"{c.draft_hidden_s:.2f} s (after the first token)", "exposed"))
    return rows


def render_cards(records: dict[str, RunRecord], meta: dict, spreads: dict | None = None,
                 settings: dict | None = None) -> str:
    """One card per finished method, the same rows for all, measured on the machine named;
    then where the time went and the checks (same output as AR, fairness)."""
    c = cards(finished(records))
    if not c:
        return ""
    runs = runs_of(spreads)
    # each method's middle run on the page (the race's): the cards give its figures, the
    # rounds' ranges beside them, so that a card, its pane and the What-if fold agree
    shown = bool(meta.get("median_runs")) and runs > 1
    sp = speeds(c, None if shown else spreads)
    out = []
    for m, card in c.items():
        rows = "".join(f'<tr><th>{term(name, key)}</th><td>{value}</td></tr>'
                       for name, value, key in _card_rows(card, (spreads or {}).get(m, {}),
                                                          (sp[m][1], sp[m][2]), shown))
        state = "" if card.complete else ' <span class="msd-badge s-stopped">stopped</span>'
        out.append(f'<div class="msd-card m-{esc(m)}" data-method="{esc(m)}">'
                   f'<div class="msd-card-head" style="border-color:{esc(colour(m))}">'
                   f'<span style="color:{esc(colour(m))}">{esc(label(m))}</span>{state}</div>'
                   f'<table>{rows}</table></div>')
    many = ("" if runs < 2 else
            f" Every row: each method's middle run of {runs} (the race's); [brackets]: the range over its "
            f"{runs} interleaved runs; over AR: divided by AR's middle run." if shown else
            f" Times and speeds: the median of {runs} interleaved runs [their range]; over AR: those "
            f"medians divided by AR's; the other rows: each method's middle run (the race's).")
    cards_html = (f'<div class="msd-cards-note">Measured on {esc(machine_words(meta))}; each method ran '
                  f'alone, one after another, warm.{many}{esc(why_runs_differ(settings or {}, runs))} '
                  f'Hover a label for its definition.</div><div class="msd-cards">{"".join(out)}</div>')
    # on a phone the tiles and the panes' heads carry the main figures: the rest folds
    return (narrow_fold("cards", "Every figure, one card per method", cards_html)
            + narrow_fold("time", "Where the time went, and the checks",
                          render_breakdown(finished(records)) + render_checks(records, settings or {}, meta)))


def why_runs_differ(settings: dict, runs: int) -> str:
    """Why the same prompt gives other speeds from run to run: the speculative methods choose
    each window as they run (priced windows: from the costs they measure; adaptive ones: from
    the draft's confidence and the last verdicts); '' for fixed windows."""
    how = {"priced": "from costs measured while they run (drafting only where it pays)",
           "adaptive": "from the draft's confidence and the last verdicts"}.get(str(settings.get("window")))
    if not how:
        return ""
    spread = ("the range across the interleaved runs shows that spread" if runs > 1 else
              "“3, interleaved” runs show that spread as a range")
    return (f" The speculative methods choose each window {how}, so their windows, and with them "
            f"their speed, differ from run to run; {spread}.")


OVERLAP_COUNT = re.compile(r"lanes overlapped in \d+ of \d+ steps")


def lane_words(rec: RunRecord) -> tuple[str, int, int]:
    """(how Mirror-SD's lanes shared the machine, in the engine's words (Finish stats
    `lane_split`) with its step count replaced by the spans' own; steps with both lanes at
    once; verify steps): one count, whose denominator is the cards' verify steps."""
    split = str((rec.finish.stats if rec.finish else {}).get("lane_split") or "")
    at_once, steps = lanes_at_once(rec)
    if split and steps:
        count = f"both lanes at once in {at_once} of its {steps} verify steps"
        split = OVERLAP_COUNT.sub(count, split) if OVERLAP_COUNT.search(split) else f"{split}; {count}"
    return split, at_once, steps


def _checked_words(rec: RunRecord, apart: bool = False) -> str:
    """The exit check's finding for the steps in turn, one sentence (empty without a check)."""
    t = turn_check(rec)
    if not t:
        return ""
    c = exit_check(rec)
    return (f' <span title="The early exit, read at each step after the run, ranked the target\'s own token '
            f'among the {c["budget"]} branches the draft would have written beside it.">Checked after the run '
            f'(untimed), <b>{esc(checked_words(t, apart))}</b>.</span>')


def _mostly_in_turn(rec: RunRecord) -> bool:
    """Whether most of a Mirror-SD run's verify steps ran one lane after the other (or drafted
    nothing): `_lanes_line` then says so in its own words, not the engine's."""
    _, at_once, steps = lane_words(rec)
    return bool(steps) and 2 * at_once < steps


def _lanes_line(rec: RunRecord, overlapped: str = "") -> str:
    """A Mirror-SD run's two lanes on this machine: when most steps ran one lane after the other
    (the overlap gate), that in one bold line, with what the run with the lanes at once in every
    step measured (`overlapped`, figures.overlap_measured) where it ran; else the engine's words
    (`lane_words`: how they shared the cores, in how many verify steps both worked at once), in
    full in Statistics."""
    split, at_once, steps = lane_words(rec)
    if not split:
        return ""
    measured_twin = f' <span class="msd-twin">{esc(overlapped)}</span>' if overlapped else ""
    if _mostly_in_turn(rec):  # most steps ran one lane after the other, or drafted nothing
        decoded, turns = steps_undrafted(rec), steps_in_turn(rec)
        last = steps - at_once - decoded - turns  # the last step: it drafts no next window
        others = ([f"{'all of them' if turns == steps else turns} ran the draft, then the target, as SD does"]
                  if turns else []) + ([f"{decoded} drafted nothing (a plain decode)"] if decoded else []) + (
                  ["the last had no next window to draft"] if last > 0 else [])
        how = (f"in none of its {steps} verify steps: {' and '.join(others)}" if at_once == 0 else
               f"in only {at_once} of its {steps} verify steps; of the others, {' and '.join(others)}")
        return (f'<p class="msd-lanes-line" title="{esc(split)}"><span class="msd-lanes-lead">{esc(label(rec.method))} ran '
                f'its draft beside the target (the lanes at once) {how} (its overlap gate picks the faster '
                f'order per step from the times it measures).'
                f'</span>{_checked_words(rec, apart=True)}{measured_twin}</p>')
    return (f'<p class="msd-lanes-line" title="How the target\'s and the draft\'s lanes shared this '
            f'machine, and in how many steps they ran at once"><span class="msd-verdict-note">'
            f'<b>{esc(label(rec.method))}\'s two lanes here</b>: {esc(split)}.</span>{measured_twin}</p>')


# ---- the statistics fold ------------------------------------------------------------------

METRICS = [  # (label, key in measured() or Finish.stats, format, glossary key)
    ("new tokens", "tokens", "d", None),
    ("wall time (s)", "wall_s", ".2f", None),
    ("time to first token (s)", "prefill_s", ".2f", "ttft"),
    ("decode speed (tokens / s after the first token)", "decode_tokens_per_s", ".2f", "decode"),
    ("target forwards", "target_forwards", "d", None),
    ("tokens per target forward", "mean_accepted", ".2f", "tau"),
    ("drafted tokens accepted", "acceptance_rate", ".0%", None),
    ("hits / (hits + misses) · checked: with the in-turn steps the exit check read after the run (untimed)",
     "hit_rate", ".0%", "hit"),
    ("misses (branches raced the verdict, none matched)", "fallbacks", "d", "fallback"),
    ("share of the draft's busy time beside the target (the whole run, the prompt's prefill included)",
     "draft_hidden_fraction", ".0%", None),
    ("draft proposal vocabulary (token ids)", "draft_vocab", "vocab", None),
]


def _metric(stats: dict, key: str, spec: str) -> str:
    if spec == "vocab":  # None: the draft's full head; absent: no draft (AR)
        return ("full" if stats.get(key) is None else f"{stats[key]:,}") if key in stats else "–"
    if key == "hit_rate" and stats.get("checked_rate") is not None:
        own = "–" if stats.get("hit_rate") is None else format(stats["hit_rate"], spec)
        return f"{own} · {stats['checked_rate']:.0%} checked"
    if key == "fallbacks" and stats.get("hit_rate") is None:
        return "–"  # no prepared branches (AR, SD): every SD window is drafted after its verdict
    return _fmt(stats.get(key), spec)


def _greedy_check(records: dict[str, RunRecord], method: str) -> str:
    cmp, name = against_ar(records, method), label(method)
    if cmp is None:
        return ""
    if cmp.get("stopped"):
        return (f'<li class="msd-check c-na">{esc(name)} vs AR: not compared (a run was stopped '
                f'or failed).</li>')
    ar, other = records["ar"], records[method]
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


def render_breakdown(done: dict[str, RunRecord]) -> str:
    """Per run, one bar of its wall time by part (same scale for all), draft hidden beneath."""
    parts = {m: breakdown(done[m]) for m in done}
    parts = {m: p for m, p in parts.items() if p}
    if not parts:
        return ""
    longest = max(sum(p[k] for k in PARTS) for p in parts.values()) or 1.0
    rows = []
    for m, p in parts.items():
        cells = "".join(
            f'<span class="msd-bk b-{k}" style="width:{100 * p[k] / longest:.2f}%" '
            f'title="{esc(PART_NAMES[k])}: {p[k]:.2f} s"></span>' for k in PARTS if p[k] > 0)
        # the hidden drafting happened after the first token: its bar starts there
        hidden = (f'<span class="msd-bk" style="width:{100 * p["first_token"] / longest:.2f}%"></span>'
                  f'<span class="msd-bk b-draft_hidden" style="width:{100 * p["draft_hidden"] / longest:.2f}%" '
                  f'title="{esc(PART_NAMES["draft_hidden"])}: {p["draft_hidden"]:.2f} s"></span>'
                  if p["draft_hidden"] > 0 else "")
        text = " · ".join(f"{PART_NAMES[k].split(' (')[0]} {p[k]:.2f}" for k in PARTS + ("draft_hidden",)
                          if p[k] >= 0.005 or k == "first_token")
        rows.append(f'<div class="msd-bk-row"><span class="msd-bk-name">{esc(label(m))}</span>'
                    f'<div class="msd-bk-bars"><div class="msd-bk-bar">{cells}</div>'
                    f'<div class="msd-bk-bar thin">{hidden}</div>'
                    f'<div class="msd-bk-text">{esc(text)} s</div></div></div>')
    key = "".join(f'<span><i class="msd-bk b-{k}"></i>{esc(PART_NAMES[k])}</span>'
                  for k in PARTS + ("draft_hidden",))
    return (f'<div class="msd-breakdown"><div class="msd-sub">Where the time went (from the '
            f'measured spans; bars on one scale, each ends at its run\'s wall time)</div>'
            f'{"".join(rows)}<div class="msd-bk-key">{key}</div></div>')


def render_lanes(done: dict[str, RunRecord], runs: int = 1, said: str | None = None) -> str:
    """The measured per-forward costs, the lanes' contention and the early exit's share; `said`:
    the method whose lanes `_lanes_line` already gave in the engine's words (not again here)."""
    c, lines = costs(done), []
    k = contention(c)
    ms = lambda x: f"{x * 1e3:.0f} ms"  # noqa: E731
    if c.get("target"):
        line = f"one target forward (1 token, AR) {ms(c['target'])}"
        mean = ledger_terms(done["ar"]) if "ar" in done else None
        if mean and f"{mean['forwards']:.0f}" != f"{c['target'] * 1e3:.0f}":  # the ledger's AR figure is a mean
            line += f" (the median; the ledger's mean, {_ms(mean['forwards'])} ms, counts the slow forwards too)"
        if c.get("draft"):
            line += (f"; one draft forward alone (1 token, the median over SD's windows) {ms(c['draft'])}, "
                     f"<b>{c['draft'] / c['target']:.0%}</b> of a target forward")
        lines.append(line)
    if k.get("verify"):
        lines.append(f"sharing the hardware: the target's verify forward ({c['verify_window'] + 1} tokens) took "
                     f"{ms(c['verify_alone'])} alone (SD) and {ms(c['verify_beside'])} beside the "
                     f"draft ({esc(label(c['beside_method']))}, its steps with both lanes at once): "
                     f"<b>{k['verify']:.2f}×</b>"
                     + ("; alone, no slower than the 1-token forward above: reading the weights dominates "
                        "a forward here, so its time hardly grows with its tokens (medians over other steps)"
                        if c.get("target") and c["verify_alone"] <= c["target"] else ""))
    if k.get("draft"):
        lines.append(f"one draft forward over a batch of branches, beside the target: {ms(c['draft_beside'])} a "
                     f"forward, {k['draft']:.2f}× a one-token draft forward alone")
    for m in (m for m in exit_mirrors(done) if done[m].finish and m != said):
        if split := lane_words(done[m])[0]:
            lines.append(f"{esc(label(m))}'s two lanes: {esc(str(split))}")
    ee = early_exit_share(done.get("mirror"))
    if ee and ee["steps"]:
        lines.append(
            f"{term('early exit', 'exit layer')} at layer {ee['layer']}"
            f"{' (read through a small trained ' + term('correction', 'exit lens') + ')' if ee.get('lens') else ''}: its top {ee['kappa']} guesses held "
            f"the target's token in <b>{ee['exit_held']} of {ee['steps']}</b> steps (its top-1 in "
            f"{ee['exit_top1']}); of {ee['hits']} {term('hits', 'hit')}, <b>{ee['hits_from_exit']}</b> "
            f"started from one of its guesses and {ee['hits_from_draft']} from the draft's own")
    check = exit_check(done["mirror"]) if "mirror" in done else None
    if check:
        rec = done["mirror"]
        t = turn_check(rec)
        agree = (f"; on the {check['overlapped']} overlapped steps the check agreed with the lanes' own outcome "
                 f"in {check['agree']}" if check.get("overlapped") else "")
        lines.append(f"exit check, after the run (untimed): {esc(checked_words(t, apart=True))}; "
                     f"the early exit read at each, the verdict's root within the {check['budget']} branches the "
                     f"draft would have rolled out{agree}")
    if not lines:
        return ""
    which = f"each method's middle run (the race's) of {runs} interleaved runs" if runs > 1 else "this run"
    return (f'<div class="msd-sub">Measured on {which} (medians over the steps after the '
            f'first)</div><ul class="msd-lanes">' + "".join(f"<li>{x}</li>" for x in lines) + "</ul>")


def render_statistics(records: dict[str, RunRecord], settings: dict | None = None,
                      meta: dict | None = None, runs: int = 1, spreads: dict | None = None) -> str:
    """The fold under the results: checks, where the time went, measured costs, every figure."""
    settings, meta = settings or {}, meta or {}
    done = finished(records)
    if not done:
        return ""
    order = list(done)
    values = {m: {**done[m].finish.stats, **measured(done[m]),
                  "checked_rate": (turn_check(done[m]) or {}).get("rate")} for m in order}
    rows = "".join(
        f"<tr><th>{term(name, tip) if tip else esc(name)}</th>" + "".join(
            f"<td>{esc(_metric(values[m], key, spec))}</td>" for m in order) + "</tr>"
        for name, key, spec, tip in METRICS)
    which = f"each method's middle run (the race's) of {runs} interleaved runs" if runs > 1 else "this run"
    table = (f'<table class="msd-table"><thead><tr><th>{which}, totals</th>'
             + "".join(f"<th>{esc(label(m))}</th>" for m in order)
             + f"</tr></thead><tbody>{rows}</tbody></table>")
    cross = cross_sentence(meta)
    cross = f'<p class="msd-why msd-cross">{esc(cross)}</p>' if cross else ""
    c = cards(done)
    sub = verdict_sub(c, meta, spreads)
    cross = (f'<p class="msd-verdict-sub">{esc(sub)}</p>' if sub else "") + cross
    lanes = overlapped_and_gated(c)[1] or ("mirror" if "mirror" in done else None)
    said = None
    if lanes:  # the gated run's lanes where it ran (its gate's choice), else Mirror-SD's
        line = _lanes_line(done[lanes], overlap_measured(c, spreads))
        cross += line
        said = None if _mostly_in_turn(done[lanes]) else lanes  # the engine's words: not again below
    own = [f"{label(m)}: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in variant_of(m)[1].items())
           for m in done if variant_of(m)[1]]  # the methods that ran with settings of their own
    facts = " · ".join(x for x in (_settings_line(settings, meta), "; ".join(own) if settings else "",
                                   windows_drafted(done) if settings else "") if x)
    return (f'<div class="msd-summary">{reason_items(records, meta, runs, spreads)}{cross}{render_lanes(done, runs, said)}{table}'
            f'<div class="msd-facts">{_with_terms(esc(facts))}</div></div>')


def render_checks(records: dict[str, RunRecord], settings: dict, meta: dict) -> str:
    """The greedy check (identical output), the fairness line, stopped runs."""
    done = finished(records)
    if not done:
        return ""
    checks = ""
    if float(settings.get("temperature", 0.0)) == 0.0:
        checks = "".join(_greedy_check(done, m) for m in done if m != "ar")
    elif len(done) > 1:
        checks = ('<li class="msd-check c-na">Sampling (temperature > 0): each method draws '
                  'its own random numbers, so outputs are different samples of the same '
                  'distribution and are not compared token by token.</li>')
    for m in done:
        if done[m].cancelled:
            checks += f'<li class="msd-check c-na">{esc(label(m))} was stopped early.</li>'
    return f'<ul class="msd-checks">{checks}{_fairness(meta, list(done))}</ul>'


SETTING_WORDS = (("window setting", "gamma"), ("early-exit guesses", "kappa"), ("exit layer", "exit layer"))


def _with_terms(text: str) -> str:
    """The settings line with its words defined on hover (the glossary names their symbols)."""
    for words, key in SETTING_WORDS:
        text = text.replace(f"{words} ", term(words, key) + " ", 1)
    return text


def _fairness(meta: dict, order: list[str]) -> str:
    """Which weights ran and that every timed run was warm."""
    precision = meta.get("precision")
    if not precision:
        return ""
    names = ", ".join(label(m) for m in order)
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
        parts.append(f"target {human_name(meta['target'])} ({meta.get('target_layers', '?')} layers, "
                     f"{meta.get('target_device', '?')})")
    if meta.get("draft"):
        parts.append(f"draft {human_name(meta['draft'])} ({meta.get('draft_device', '?')})")
    if meta.get("precision"):
        dp = meta.get("draft_precision")
        parts.append(f"precision {meta['precision']}"
                     + (f", draft {dp}" if dp and dp not in ("same", meta["precision"]) else ""))
    if settings:
        t = float(settings.get("temperature", 0.0))
        parts.append(f"{window_setting(settings)} · early-exit guesses {settings.get('kappa')} "
                     f"per position · exit layer {meta.get('exit_layer', settings.get('exit_layer'))} · "
                     f"branch budget {settings.get('branch_budget')}")
        auto = meta.get("auto")
        if auto:
            sp = auto.get("projected_speedup")
            parts.append(f"window and branch budget chosen automatically (projected {sp:.2f}× by the latency "
                         f"model from a {auto.get('probe_s', 0):.1f} s probe: a projection)"
                         if sp is not None else "window and branch budget chosen automatically")
        parts.append("greedy" if t == 0 else
                     f"temperature {t:g}, top-p {settings.get('top_p')}, seed {settings.get('seed')}")
        parts.append(f"max {settings.get('max_new_tokens')} new tokens")
    if meta.get("prompt_tokens"):
        parts.append(f"prompt {meta['prompt_tokens']} tokens")
    return " · ".join(parts)


def window_setting(settings: dict) -> str:
    """The window setting as what it bounds: fixed windows draft it every step; adaptive ones
    start there; priced ones (the default) are priced each step from the measured costs, from
    none up to the longest window allowed, so the windows drafted can be shorter than it."""
    gamma, policy, top = settings.get("gamma"), str(settings.get("window") or "fixed"), settings.get("window_max")
    if policy == "priced":
        return (f"windows priced each step from the measured costs: 0 to {top or gamma} tokens "
                f"(window setting {gamma} tokens: not their length here)")
    if policy == "adaptive":
        return f"window setting {gamma} tokens (adaptive windows start there, {settings.get('window_min', 1)} to {top})"
    return f"window setting {gamma} tokens (every window)"


def windows_drafted(done: dict[str, RunRecord]) -> str:
    """The windows each speculative run drafted, beside the setting: 'SD 1 / 4 / 8, ...'."""
    c = cards(done)
    got = [f"{label(m)} {x.windows[0]} / {x.windows[1]:g} / {x.windows[2]}" for m, x in c.items() if x.windows]
    return f"windows drafted (min / median / max): {', '.join(got)}" if got else ""
