// The live board (ui/live.py sends the items): each run's pane grows step by step while it
// runs; after the last run the runs replay together at their measured pace, then the page
// shows the panes rendered from the full records. Runs as gr.HTML's js_on_load: `element`,
// `props` (props.value: the latest JSON message) and `watch` come from Gradio.
const LAG_MS = 350;  // live: drawn this far behind the newest data, so steps appear one by one
const SPEEDS = {'0.5×': 0.5, '1×': 1, '2×': 2, 'instant': Infinity};
const STATES = {waiting: 'waiting', running: 'running…', done: 'done', stopped: 'stopped',
                error: 'error', skipped: 'not run', race: 'replay'};
const B = {runs: {}, order: [], mode: 'idle', speed: 1, race: null, raf: 0, seq: null};
const $ = (sel, root) => (root || element).querySelector(sel);
const mk = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text; return e; };
const secs = (ms) => (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
const board = () => element.querySelector('.msd-board');
const KEY = [['<i style="background:#334155"></i>', 'target'], ['<i style="background:#94a3b8"></i>', 'target after the early exit'],
             ['<i style="background:#be185d"></i>', 'early exit'], ['<i style="background:#22d3ee"></i>', 'draft beside the target'],
             ['<i style="background:#0e7490"></i>', 'draft, the target waits'], ['<i class="msd-btl-fkey"></i>', 'finish'],
             ['<i class="msd-btl-ckey"></i>', 'now']];
const host = () => document.querySelector('#board-timeline .msd-btl-host');

function header(text) { const h = $('.msd-board-say'); if (h) h.textContent = text; }
function boardNote(text) { const n = $('.msd-board-note'); if (n) n.textContent = text || ''; }

// one block per run: its name on the left (wrapping), then a row per lane named by the lane
function laneRows(run, tl) {
  const lanes = run.m === 'ar' ? [['t', 'target']] : [['t', 'target'], ['d', 'draft']];
  run.lanes = {};
  const block = mk('div', 'msd-btl-run'), rows = mk('div', 'msd-btl-rows');
  block.append(mk('div', 'msd-btl-group', run.label), rows);
  for (const [code, name] of lanes) {
    const row = mk('div', 'msd-btl-row');
    const label = mk('span', 'msd-btl-name', name); label.title = run.label + ' · ' + name;
    const track = mk('div', 'msd-btl-track');
    row.append(label, track); rows.append(row); run.lanes[code] = track;
  }
  tl.append(block);
}

function build(heads) {
  const panes = $('.msd-board-panes');
  panes.textContent = '';
  B.tvt = null;
  const tl = host();
  if (tl) { tl.textContent = ''; tl.style.setProperty('--axis', 1000); }
  B.axisSet = false;
  B.runs = {}; B.order = [];
  for (const h of heads) {
    const run = {m: h.m, label: h.label, on: h.on, items: [], drawn: 0, tokens: 0, lastT: 0, now: 0,
                 lastWall: 0, ended: false, endT: null, step: null, growing: []};
    const pane = mk('div', 'msd-pane msd-bpane m-' + h.m);
    const head = mk('div', 'msd-pane-head');
    const name = mk('span', 'msd-name', h.label); name.style.color = h.colour;
    run.badge = mk('span', 'msd-badge'); run.stat = mk('span', 'msd-stat');
    run.clock = mk('span', 'msd-clock');  // this run's own time: the status line's counts the whole job
    run.clock.title = 'Time since this run\'s start (the methods run in turn; the status line\'s "job" time counts every run and round)';
    head.append(name, run.badge);
    if (h.tag) head.append(mk('span', 'msd-badge s-variant', h.tag));  // a variant: what it changes
    head.append(run.stat, run.clock);
    run.colour = h.colour; run.pts = [];
    run.stepBox = mk('div', 'msd-bstep'); run.pre = mk('pre', 'msd-tokens');
    run.note = mk('div', 'msd-note');
    pane.append(head, run.stepBox, run.pre, run.note);
    panes.append(pane); run.pane = pane;
    B.runs[h.m] = run; B.order.push(h.m);
    setState(run, h.on ? 'waiting' : 'skipped');
    if (!h.on) run.note.textContent = 'Not ticked under “Methods”.';
    else if (tl) laneRows(run, tl);
  }
  if (tl) { const cur = mk('div', 'msd-btl-cursor'); tl.append(cur); B.cursor = cur;
            B.axisLabel = mk('div', 'msd-btl-axis'); tl.append(B.axisLabel); axis(1000); }
  if (tl) { const key = mk('div', 'msd-btl-key');  // one entry a swatch and its words (a list of two columns on a phone)
    key.innerHTML = '<b>bars:</b>' + KEY.map(([sw, text]) => '<span class="msd-btl-k">' + sw + '<span>' + text + '</span></span>').join('') +
      '<span class="msd-btl-long">time from each run\'s own start (the runs took turns on the hardware, each warm)</span>';
    const old = tl.parentElement.querySelector(':scope > .msd-btl-key'); if (old) old.remove();
    tl.after(key); }  // under the timeline, out of the "now" line's reach
}

function setState(run, state) {
  run.state = state; run.pane.dataset.state = state;
  run.badge.className = 'msd-badge s-' + state; run.badge.textContent = STATES[state] || state;
}

// the axis's end and ticks: a round step (0.25 s .. 10 s) giving two to five intervals; live,
// with room ahead (the run goes on), the race to just past its last finish
const STEPS = [250, 500, 1000, 2000, 5000, 10000];
function axis(ms, tight) {
  const tl = host(); if (!tl) return;
  const cur = Number(tl.style.getPropertyValue('--axis')) || 1000;
  if (!tight && ms <= cur && B.axisSet) return;
  const want = Math.max(1000, ms * (tight ? 1 : 1.25));
  const step = STEPS.find(st => want / st <= 5) || 20000;
  // the race's axis ends at its last finish exactly (the chart's end label is the slowest run's
  // time), not at the next round tick (a 10.5 s race on a 15 s axis reads as slower than it was);
  // live, a round end leaves room ahead
  const nice = tight ? want : Math.ceil(want / step) * step;
  tl.style.setProperty('--axis', nice); B.axisSet = true;
  const ticks = []; for (let t = 0; t <= nice + 1; t += step) ticks.push(t);
  // ticks placed on the bars' own scale (--a ms over --axis ms of the same track width)
  if (B.axisLabel) B.axisLabel.innerHTML = ticks.map(t =>
    '<span class="msd-btl-tick' + (t === nice ? ' is-end' : '') + '" style="--a:' + t + '">' + String(+(t / 1000).toFixed(2)) + ' s</span>').join('');
}

// a token as a chip: line breaks and tabs drawn, a token of spaces alone as ␣
function visible(text) {
  if (text === '') return '∅';
  const t = text.replace(/\n/g, '↵').replace(/\t/g, '⇥');
  return t.trim() ? t : t.replace(/ /g, '␣');
}
function chip(text, cls) { return mk('span', 'msd-chip ' + (cls || ''), visible(text)); }

// a token in a pane, as ui/render.py draws it: each line break in a span.msd-nl and, in a token
// of whitespace alone (class ws), each run of spaces or tabs in a span.msd-sp; the CSS marks
// them (↵, a faint dot per space) with generated content, so the text and a copy keep the
// real characters
const isWs = (text) => text !== '' && !text.trim();
function fill(el, text, ws) {
  for (const part of text.split(/(\n|[ \t]+)/)) {
    if (part === '\n') el.append(mk('span', 'msd-nl', '\n'));
    else if (part && ws && !part.replace(/[ \t]/g, '')) el.append(mk('span', 'msd-sp', part));
    else if (part) el.append(document.createTextNode(part));
  }
  return el;
}
function tokEl(tag, cls, text) { const ws = isWs(text); return fill(mk(tag, cls + (ws ? ' ws' : '')), text, ws); }
// a committed token's pieces, cut after each line break (the later ones are-cont), each
// with whether it ends its line
function tokPieces(text, kind) {
  const ws = isWs(text);
  return text.split(/(?<=\n)/).filter((p, n) => p || !n).map((p, n) => [
    fill(mk('span', 'msd-tok k-' + kind + (ws ? ' ws' : '') + (n ? ' is-cont' : '')), p, ws), p.endsWith('\n')]);
}
// the pane's text in one box per line (span.msd-ln): a long line wraps under a hanging
// indent with a bar beside its continuation (ui/style.css)
function put(run, el, endsLine) {
  if (!run.line) { run.line = mk('span', 'msd-ln'); run.pre.append(run.line); }
  run.line.append(el);
  if (endsLine) run.line = null;
}

// the verdict's line in a step: what the target kept of the window and its own token; a step
// that drafted nothing (the window priced at 0) says so, not "kept 0 of 0"
function verdictLine(item) {
  const line = mk('div', 'msd-bline is-verdict');
  if (!item.d.length) {
    line.append(mk('span', 'msd-blab', 'no draft, the target\'s own token:'), chip(item.y, 'c-plain'));
    return line;
  }
  line.append(mk('span', 'msd-blab', 'verdict'));
  const kept = mk('span', 'msd-bchips');
  item.d.forEach((d, j) => kept.append(chip(d, j < item.a ? 'c-ok' : (j === item.a ? 'c-no' : 'c-gone'))));
  const own = mk('span', 'msd-bown');
  own.append(mk('span', 'msd-barrow', '→ target:'), chip(item.y, item.kd === 'bonus' ? 'c-bonus' : 'c-corr'));
  line.append(kept, own, mk('span', 'msd-bsum', 'kept ' + item.a + ' of ' + item.d.length + ' drafted'));
  return line;
}
// a window that came from a late hit (ui/runs.py late_ms, late_words): its badge, in whole ms,
// on the step's drafted line: where the window came from, apart from what the target kept of it
function lateBadge(ms) {
  const b = mk('span', 'msd-blate', 'from a late hit +' + ms + ' ms');
  b.title = 'This window is the branch the previous verdict matched (a branch hit: the branch began with the ' +
            'target\'s own token), but the draft finished it ' + ms + ' ms after that verdict: the target waited ' +
            'that long for it (a late hit). How many of its tokens the target keeps is the verdict\'s line.';
  return b;
}
window.msdBoard = {verdictLine, tokPieces, tokEl, lateBadge};  // the pure builders, for the browser test

function stepBox(run, item) {
  if (run.step !== item.s) { run.step = item.s; run.stepBox.textContent = '';
    run.stepBox.append(mk('span', 'msd-bstep-n', 'step ' + (item.s + 1))); }
  const box = run.stepBox;
  if (item.k === 'w') {
    const line = mk('div', 'msd-bline is-window'); line.append(mk('span', 'msd-blab', 'drafted'));
    for (const d of item.d) line.append(chip(d, 'c-draft'));
    box.append(line);
  } else if (item.k === 'x') {
    const line = mk('div', 'msd-bline is-exit'); line.append(mk('span', 'msd-blab', 'early exit (layer ' + item.l + ') guesses'));
    item.g.forEach((g, j) => { const grp = mk('span', 'msd-bgrp'); grp.title = 'position ' + (j + 1) + ': the target\'s three likeliest tokens at its early exit';
      for (const t of g) grp.append(chip(t, 'c-exit')); line.append(grp); });
    box.append(line);
  } else if (item.k === 'b') {
    let line = box.querySelector('.msd-bbranches');
    if (!line) { line = mk('div', 'msd-bline msd-bbranches'); line.append(mk('span', 'msd-blab', 'branches beside the target')); box.append(line); }
    if (line.children.length > 4) return;
    const grp = mk('span', 'msd-bgrp b-' + item.st);
    grp.title = item.st === 'taken' ? 'this branch matched the verdict: the next window, begun before it (a branch hit)' : 'not the verdict: dropped';
    grp.append(chip(item.r, 'c-root'));
    for (const t of item.d) grp.append(chip(t, 'c-branch'));
    line.append(grp);
  } else if (item.k === 'v') {
    box.append(verdictLine(item));
    if (item.h !== undefined) (box.querySelector('.msd-bline.is-window') || box.lastChild).append(lateBadge(item.h));
  }
}

function pending(run, texts) {
  if (run.pend) run.pend.remove();
  run.pend = null;
  if (!texts) return;
  run.pend = mk('span', 'msd-pend');
  for (const t of texts) run.pend.append(tokEl('span', 'msd-tok k-pending', t));
  put(run, run.pend, false);
}

function commit(run, item) {
  pending(run, null);
  if (item.r !== undefined) { const s = tokEl('s', 'msd-rej', item.r); s.title = 'rejected draft token at step ' + (item.s + 1); s.dataset.step = item.s; put(run, s, false); }
  for (const [text, kind] of item.x) {
    for (const [t, ends] of tokPieces(text, kind)) { t.dataset.step = item.s; put(run, t, ends); }
  }
  run.tokens += item.x.length;
  run.pts.push([item.t, run.tokens]);
  toNewest(run.pre);
}

// scrolled to its newest tokens with its top row whole: the scroll stops where a row starts
// (the text keeps one row of room under its end for that), so no half-cut row sits under the
// step's lines and reads as text
function toNewest(pre) {
  const css = getComputedStyle(pre), lh = parseFloat(css.lineHeight);
  if (!(lh > 0)) { pre.scrollTop = pre.scrollHeight; return; }
  if (!pre.dataset.room) { pre.style.paddingBottom = lh + 'px'; pre.dataset.room = '1'; }
  const pad = parseFloat(css.paddingTop) || 0;
  const need = pre.scrollHeight - lh - pre.clientHeight;  // the least scroll that shows the last row whole
  pre.scrollTop = need <= 0 ? 0 : pad + Math.ceil((need - pad) / lh - 0.01) * lh;
}

// a span's bar from its start; in the race it grows with the clock to its end (live, a span
// arrives once it has ended)
function span(run, item, clock) {
  const track = run.lanes && run.lanes[item.l]; if (!track) return;
  const bar = mk('i', 'msd-btl-bar n-' + item.n.replace(/[^a-z_]/g, '_'));
  bar.style.setProperty('--a', item.a);
  bar.title = run.label + ' · ' + item.n + ' · ' + (item.b - item.a).toFixed(1) + ' ms';
  track.append(bar);
  if (clock < item.b) run.growing.push([bar, item]);
  grow(bar, item, clock);
  if (B.mode !== 'race') axis(item.b);
}
function grow(bar, item, clock) { bar.style.setProperty('--d', Math.max(Math.min(item.b, clock) - item.a, 0.3)); }

function finish(run, item) {
  run.ended = true; run.endT = item.w; run.rate = item.r;  // the pane head's tok/s end to end
  setState(run, item.c ? 'stopped' : 'done');
  pending(run, null);
  run.clock.textContent = 'run took ' + secs(item.w); run.clock.classList.add('is-done');
  if (item.c) run.note.textContent = 'Stopped: the run ended at the next step after Stop, ' + item.n + ' tokens in.';
  for (const track of Object.values(run.lanes || {})) {
    const flag = mk('i', 'msd-btl-flag'); flag.style.setProperty('--a', item.w);
    flag.title = run.label + ' finished at ' + secs(item.w); track.append(flag);
  }
  if (B.mode !== 'race') axis(item.w);
}

function draw(run, item, clock) {
  if (item.k === 'c') commit(run, item);
  else if (item.k === 'p') span(run, item, clock);
  else if (item.k === 'f') finish(run, item);
  else if (item.k === 'e') { setState(run, 'error'); run.note.textContent = item.m; }
  else if (item.k === 'n') run.note.textContent = item.m;
  else { stepBox(run, item); if (item.k === 'w') pending(run, item.d); else if (item.k === 'v') pending(run, null);
    toNewest(run.pre); }  // the step's lines may change the text's height: its top row stays whole
}

function advance(run, clock) {
  while (run.drawn < run.items.length && run.items[run.drawn].t <= clock) draw(run, run.items[run.drawn++], clock);
  for (const [bar, item] of run.growing) grow(bar, item, clock);
  run.growing = run.growing.filter(([, item]) => item.b > clock);
  // the count after every draw, the run's last one included (its end may come in the same tick)
  if (run.drawn) run.stat.innerHTML = '<b>' + run.tokens + '</b> tokens';
  // its own run's clock: live, the run's time so far; in the race, the replay's time since its start
  if (!run.ended && run.drawn) run.clock.textContent = (B.mode === 'race' ? 't = ' : 'run ') + secs(Math.max(0, clock));
  if (isFinite(clock)) run.now = Math.max(0, clock);  // the chart's "so far": tokens over this time
}

// on a phone, where the panes stack, the race in brief above them: a bar per run, its tokens so
// far against the most any run wrote (live.css shows it there only)
function minis() {
  const box = $('.msd-bmini'); if (!box) return;
  const runs = B.order.map(m => B.runs[m]).filter(r => r.on);
  const totals = runs.map(r => { const f = r.items.length && r.items[r.items.length - 1]; return f && f.k === 'f' ? f.n : r.tokens; });
  const top = Math.max(1, ...totals, ...runs.map(r => r.tokens));
  const key = runs.map(r => r.tokens + (r.ended ? 'e' : '') + (r.stale ? 's' : '')).join(',') + '/' + top;
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.innerHTML = runs.map(r => '<div class="bm-row' + (r.stale ? ' is-stale' : '') + '"><span class="bm-name">' +
    r.label.replace(/&/g, '&amp;').replace(/</g, '&lt;') + '</span><span class="bm-track"><i style="width:' +
    (100 * r.tokens / top).toFixed(1) + '%;background:' + r.colour + '"></i></span><span class="bm-n">' + r.tokens +
    (r.stale ? ' (round ' + r.staleRound + ')' : r.ended ? ' ✓' : '') + '</span></div>').join('');  // a faded run is the round before's: no tick
}

// tokens written against time, one line per run on the timeline's time axis, its key each run's
// speed so far (tokens over its own time; an ended run's over its whole run): the race at a glance
const TVT_L = 30, TVT_R = 8, TVT_B = 18;  // drawn at the box's own pixel size (text at its real size)
function chart() {
  const box = $('.msd-tvt'); if (!box) return;
  const runs = B.order.map(m => B.runs[m]).filter(r => r.on && r.pts.length);
  if (!runs.length) { box.textContent = ''; B.tvt = null; return; }
  const axisMs = Number((host() || box).style.getPropertyValue('--axis')) || 1000;
  const top = Math.max(16, ...runs.map(r => r.tokens));
  const TVT_W = Math.round(Math.min(960, Math.max(280, box.clientWidth || 600)));
  const TVT_H = TVT_W < 500 ? 130 : TVT_W < 800 ? 120 : 150;  // drawn at its own size (a phone's too), not scaled
  const key = TVT_W + '/' + axisMs + '/' + top + '/' + runs.map(r => r.pts.length + (r.ended ? 'e' : '') + (r.stale ? 's' : '') +
    (r.ended || r.stale ? '' : '@' + Math.floor((r.now || 0) / 250))).join(',');  // a running run's speed: four times a second
  if (key === B.tvt) return;  // nothing new to draw
  B.tvt = key;
  const x = t => TVT_L + (TVT_W - TVT_L - TVT_R) * Math.min(t, axisMs) / axisMs;
  const y = n => TVT_H - TVT_B - (TVT_H - TVT_B - 6) * n / top;
  let svg = '<line class="tvt-ax" x1="' + TVT_L + '" y1="' + y(0) + '" x2="' + (TVT_W - TVT_R) + '" y2="' + y(0) + '"/>' +
            '<line class="tvt-ax" x1="' + TVT_L + '" y1="' + y(0) + '" x2="' + TVT_L + '" y2="6"/>' +
            '<text class="tvt-lab" x="' + (TVT_L - 4) + '" y="' + (y(top) + 4) + '" text-anchor="end">' + top + '</text>' +
            '<text class="tvt-lab" x="' + (TVT_L - 4) + '" y="' + y(0) + '" text-anchor="end">0</text>' +
            '<text class="tvt-lab" x="' + (TVT_W - TVT_R) + '" y="' + (TVT_H - 3) + '" text-anchor="end">' + secs(axisMs) + '</text>' +
            '<text class="tvt-lab" x="' + TVT_L + '" y="' + (TVT_H - 3) + '">0 s</text>' +
            '<text class="tvt-lab" x="' + ((TVT_L + TVT_W - TVT_R) / 2) + '" y="' + (TVT_H - 3) + '" text-anchor="middle">tokens written over time</text>';
  const ends = [];
  for (const r of runs) {
    // an ended run's line runs on to its end, and its speed is its tokens over its whole run (the
    // pane head's "tok/s end to end"); a running one's, on to its clock: its tokens over the time so far
    const last = r.ended && r.endT !== null ? r.endT : !r.ended && !r.stale && r.now > r.pts[r.pts.length - 1][0] ? r.now : null;
    const pts = [[0, 0]].concat(r.pts, last !== null ? [[last, r.tokens]] : []);
    let d = 'M' + x(0) + ' ' + y(0);
    for (let i = 1; i < pts.length; i++) d += ' H' + x(pts[i][0]).toFixed(1) + ' V' + y(pts[i][1]).toFixed(1);
    svg += '<path class="tvt-line' + (r.stale ? ' is-stale' : '') + '" d="' + d + '" style="stroke:' + r.colour + '"/>';
    const [t, n] = pts[pts.length - 1];
    const rate = r.ended && r.rate != null ? r.rate : t > 0 ? n / (t / 1000) : 0;
    svg += '<circle class="tvt-dot" cx="' + x(t).toFixed(1) + '" cy="' + y(n).toFixed(1) + '" r="3" style="fill:' + r.colour + '"/>';
    // a running run's key: its tokens so far, no speed (the chart redraws four times a second, the
    // clock every frame, so a speed beside the clock would read a frame behind it); an ended run's speed
    const text = r.stale ? n + ' tokens, ' + rate.toFixed(2) + ' tok/s (round ' + r.staleRound + ', faded)' :
      r.ended ? n + ' tokens in ' + secs(t) + ', ' + rate.toFixed(2) + ' tok/s' : n + ' tokens so far';
    ends.push({rate: rate, text: r.label + ': ' + text, colour: r.colour});
  }
  ends.sort((a, b) => b.rate - a.rate);  // the key, fastest first
  box.innerHTML = '<svg viewBox="0 0 ' + TVT_W + ' ' + TVT_H + '" width="' + TVT_W + '" height="' + TVT_H + '" role="img">' + svg + '</svg><div class="tvt-key">' +
    ends.map(e => '<span><i style="background:' + e.colour + '"></i>' + e.text.replace(/&/g, '&amp;').replace(/</g, '&lt;') + '</span>').join('') + '</div>';
}

// a later round keeps each pane's previous run on screen, faded, until its own run starts
function carryOver(round) {
  for (const m of B.order) {
    const run = B.runs[m]; if (!run.on || !run.items.length) continue;
    run.stale = true; run.staleRound = round - 1; run.pane.classList.add('is-stale'); setState(run, 'waiting');
    run.badge.textContent = 'waiting its turn · shown faded: its run ' + (round - 1);
    run.note.textContent = 'Faded: its round ' + (round - 1) + ' run, shown until its round ' + round + ' run starts.';
  }
}
// each method's last ended run (the faded panes'), quickest first: [label, seconds]; a run whose
// finish has come but not yet been drawn (the pane plays a little behind the engine) counts too
function lastTimes() {
  return B.order.map(m => B.runs[m]).filter(r => r.on).map(r => {
    const f = r.items.length ? r.items[r.items.length - 1] : null;
    const t = r.ended && r.endT !== null ? r.endT : f && f.k === 'f' ? f.w : null;
    return t === null || t === undefined ? null : [r.label, t / 1000];
  }).filter(Boolean).sort((a, b) => a[1] - b[1]);
}
// the board's header while runs are timed; from the second round on, the last round's times and
// about when the race comes (the rounds left at the last round's pace: an estimate, said as one)
function roundHeader(round, times) {
  const [r, n] = round || [1, 1];
  const how = 'each method runs alone, in turn, and its pane draws each step. ';
  const watch = ' Watch a step: the draft\'s guesses (dashed), then the target\'s check: green kept, red rejected, ' +
    'then its own token. Mirror-SD drafts branches (from a cyan token) while the target finishes.';
  if (n <= 1) return 'Live: ' + how + 'The race plays when the last run ends.' + watch;
  if (r === 1 || !times.length) return 'Round 1 of ' + n + ', live: ' + how +
    'The race plays when round ' + n + ' ends.' + watch;
  const left = times.reduce((t, x) => t + x[1], 0) * (n - r + 1);
  return 'Round ' + r + ' of ' + n + ', live: the same runs again, to tell close methods apart. Round ' + (r - 1) +
    ' took ' + times.map(x => x[0] + ' ' + x[1].toFixed(1) + ' s').join(', ') +
    '. The race plays when round ' + n + ' ends, in about ' + Math.round(left) + ' s.';
}
function resetRun(run) {
  Object.assign(run, {items: [], drawn: 0, tokens: 0, pts: [], lastT: 0, lastWall: 0, ended: false, endT: null, now: 0, rate: null,
                      step: null, line: null, pend: null, stale: false, growing: []});
  for (const el of [run.pre, run.stepBox, run.note, run.stat, run.clock]) el.textContent = '';
  run.clock.classList.remove('is-done'); run.pane.classList.remove('is-stale');
  for (const track of Object.values(run.lanes || {})) track.textContent = '';
}

function feed(msg) {
  const now = performance.now();
  for (const [m, part] of Object.entries(msg.runs)) {
    const run = B.runs[m]; if (!run) continue;
    if (run.stale) resetRun(run);
    if (part.from > run.items.length) continue;  // a gap: the race at the end has it all
    for (let i = run.items.length - part.from; i < part.items.length; i++) run.items.push(part.items[i]);
    if (run.items.length) { run.lastT = run.items[run.items.length - 1].t; run.lastWall = now; }
    if (run.state === 'waiting') setState(run, 'running');
  }
}

function liveTick(now) {
  let clockMax = 0;
  for (const m of B.order) {
    const run = B.runs[m]; if (!run.on || !run.items.length) continue;
    const done = run.items[run.items.length - 1].k === 'f';
    const clock = done ? Infinity : run.lastT + (now - run.lastWall) - LAG_MS;
    advance(run, clock);
    if (!run.ended) clockMax = Math.max(clockMax, clock);
    if (!run.ended && B.cursor) { B.cursor.style.setProperty('--a', Math.max(0, clock)); axis(clock); }
  }
  return true;
}

function raceTick(now) {
  const r = B.race;
  const clock = B.speed === Infinity ? Infinity : (now - r.start) * B.speed;
  for (const m of B.order) { const run = B.runs[m]; if (run.on) advance(run, clock); }
  if (B.cursor) B.cursor.style.setProperty('--a', Math.min(clock, r.end));
  header('Race replay' + roundWords() + ', ' + (B.speed === Infinity ? 'all at once' : B.speed + '× the measured pace') +
         ': t = ' + secs(Math.min(clock, r.end)) + ' of ' + secs(r.end) + ', each run from its own start');
  if (clock < r.end) return true;
  const order = B.order.filter(m => B.runs[m].on && B.runs[m].endT !== null)
    .sort((a, b) => B.runs[a].endT - B.runs[b].endT).map(m => B.runs[m].label);
  // the order first; where the runs cannot tell the leaders apart, that follows and no one "finished first"
  const tie = B.raceMsg && B.raceMsg.tie;
  header('Race over' + roundWords() + ': ' + (tie ? 'the finishing order ' + order.join(', ') + '. ' + tie :
         order[0] + ' finished first' + (order.length > 1 ? ', then ' + order.slice(1).join(', ') : '') + '.') +
         ' Click a token in a pane for its step.');
  setTimeout(settle, B.speed === Infinity ? 0 : 900);
  return false;
}

// which runs the race replays: each method's middle run (its median), so that its order is the medians'
function roundWords() {
  const n = B.shown;
  return n && n > 1 ? " (each method's middle run of " + n + ')' : '';
}

// while runs are timed the page draws four frames a second, not the screen's sixty: a browser on
// the engine's own machine (the app run locally) then takes little of the cores the timed runs
// use; the race after them, timing nothing, draws every frame
const LIVE_FRAME_MS = 250;
function loop() {
  B.raf = 0;
  const now = performance.now();
  const again = B.mode === 'live' ? liveTick(now) : B.mode === 'race' ? raceTick(now) : false;
  chart(); minis();
  if (!again) return;
  B.raf = B.mode === 'live' ? setTimeout(() => { B.raf = requestAnimationFrame(loop); }, LIVE_FRAME_MS)
                            : requestAnimationFrame(loop);
}
function kick() { if (!B.raf) B.raf = requestAnimationFrame(loop); }
// the runs' last items drawn now (a frame may be due in up to LIVE_FRAME_MS): the race message,
// or a Stop's, ends the live phase, and a run's end (or its stop) must show before it does
function flush() {
  for (const m of B.order) {
    const run = B.runs[m];
    if (run.on && run.items.length && run.items[run.items.length - 1].k === 'f') advance(run, Infinity);
  }
  chart(); minis();
}
// bring the panes into view when a job or a race starts, unless the reader already sees them
// (a phone, or a reader scrolled away to read): they are what the audience watches
function reveal() {
  const b = board(); if (!b) return;
  const top = b.getBoundingClientRect().top;
  if (top > window.innerHeight * 0.55 || top < -b.offsetHeight / 2) b.scrollIntoView({behavior: 'smooth', block: 'start'});
}

function settle() {
  if (B.mode === 'race') B.mode = 'settled';
  board().classList.remove('is-on', 'is-racing');
  board().classList.add('is-settled');
  if (B.cursor) B.cursor.hidden = true;  // no "now" on a finished page: every run has ended
}

// the first race after the runs hides the results under it until it ends (live.css): the
// audience sees who wins as it happens; a replay asked for later leaves them in place
function startRace(first) {
  const msg = B.raceMsg; if (!msg) return;
  build(msg.heads);
  let end = 0;
  for (const [m, part] of Object.entries(msg.runs)) {
    const run = B.runs[m]; if (!run) continue;
    run.items = part.items; setState(run, 'race'); end = Math.max(end, part.wall);
    if (part.lanes) {  // Mirror-SD's overlap gate: in how many steps its lanes ran at once
      const b = mk('span', 'msd-badge s-lanes', part.lanes); b.title = msg.lanesTip || '';
      run.stat.before(b); }
  }
  axis(end, true);
  B.race = {start: performance.now(), end: end};
  B.mode = 'race'; board().classList.remove('is-settled'); if (B.cursor) B.cursor.hidden = false;
  board().classList.add('is-on');
  board().classList.toggle('is-racing', !!first && B.speed !== Infinity);
  kick();
}

function handle(msg) {
  if (!msg || msg.seq === B.seq) return;
  B.seq = msg.seq;
  if (msg.op === 'start') {
    const same = B.order.length && msg.runs.map(h => h.m).join() === B.order.join();
    if (msg.round && msg.round[0] > 1 && same && B.mode === 'live') carryOver(msg.round[0]);
    else build(msg.runs);
    B.mode = 'live'; B.rounds = msg.round ? msg.round[1] : 1; B.raceMsg = null; board().classList.remove('is-settled', 'has-race', 'is-racing');
    if (B.cursor) B.cursor.hidden = false;
    boardNote('');
    board().classList.add('is-on');
    if (!msg.round || msg.round[0] === 1) reveal();
    header(roundHeader(msg.round, same ? lastTimes() : []));
    kick();
  } else if (msg.op === 'feed') {
    if (B.mode !== 'live') return;
    feed(msg); kick();
  } else if (msg.op === 'race') {
    if (B.mode === 'live') flush();
    B.raceMsg = msg; B.shown = msg.runs_of || null; board().classList.add('has-race'); boardNote(msg.note);
    if (msg.autoplay) { startRace(true); reveal(); }
    else { B.mode = 'settled'; settle(); header('The run ended before every method finished: no race to replay.'); }
  }
}

for (const [name, speed] of Object.entries(SPEEDS)) {
  const b = mk('button', 'msd-speed', name); b.type = 'button'; b.dataset.speed = name;
  if (speed === 1) b.classList.add('is-on');
  b.addEventListener('click', () => {
    const now = performance.now();
    if (B.mode === 'race' && isFinite(B.speed) && isFinite(speed))  // the clock carries on
      B.race.start = now - (now - B.race.start) * B.speed / speed;
    B.speed = speed;
    element.querySelectorAll('.msd-speed').forEach(x => x.classList.toggle('is-on', x === b));
    if (B.mode === 'race' && speed === Infinity) kick(); });
  $('.msd-board-speeds').append(b);
}
$('.msd-replay').addEventListener('click', () => { if (B.raceMsg) startRace(); });
watch('value', () => { try { handle(JSON.parse(props.value || 'null')); } catch (e) { console.error(e); } });
if (props.value) { try { handle(JSON.parse(props.value)); } catch (e) { console.error(e); } }
