"""Per-step draft windows (engine/windows.py): the policy's rules, and that SD and Mirror-SD
under the adaptive policy still give transformers' own greedy output and sample from the
target's distribution; the windows' lengths and stop reasons reach the events and the stats."""
import html
import re

import pytest
import torch

from mirror_sd.bench import harness as bench
from mirror_sd.bench import runners
from mirror_sd.questions import load_questions
from mirror_sd.bench.summary import window_cell
from mirror_sd.engine.events import DraftBranch, EarlyExit, Notice, Span, StepStart, Verify
from mirror_sd.engine.registry import METHODS
from mirror_sd.engine.settings import Settings
from mirror_sd.engine.windows import STOP_REASONS, WindowPolicy, policy_for
from mirror_sd.errors import MirrorSDError
from mirror_sd.models.pair import ModelPair

import tiny
from test_bench import NEW, SAMPLE
from test_bench import tiny_pair as bench_pair
from tiny import CHI2_CRIT_001, chi_square, one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPECULATIVE = ("sd", "mirror")
THRESHOLD = 0.08  # tiny random models: the draft's probabilities sit around 1/vocab, so this mixes stops


def adaptive(**kw) -> WindowPolicy:
    return WindowPolicy(**{"kind": "adaptive", "gamma": 4, "threshold": 0.4, "min_len": 1, "max_len": 8,
                           "eos": frozenset({7}), **kw})


# ---------------------------------------------------------------- the policy's rules

# (verdicts as (drafted, accepted), the next length) from gamma 4 in [1, 8]
SCHEDULE = [
    ([], 4),
    ([(4, 4)], 6),  # fully accepted: +2
    ([(4, 4), (6, 6)], 8),
    ([(4, 4), (6, 6), (8, 8)], 8),  # capped at max
    ([(4, 2)], 3),  # a rejection: -1
    ([(4, 0), (3, 0), (2, 0), (1, 0)], 1),
    ([(4, 0), (3, 0), (2, 0), (1, 0), (1, 0)], 1),  # floored at min
    ([(4, 3), (3, 3)], 5),  # a window cut short and fully accepted still grows
]


@pytest.mark.parametrize("verdicts,length", SCHEDULE)
def test_adaptive_length_follows_the_verdicts(verdicts, length):
    policy = adaptive()
    for drafted, accepted in verdicts:
        policy.observe(drafted, accepted)
    assert policy.plan(room=100) == (length, "gamma")


@pytest.mark.parametrize("token,q,why", [(3, 0.9, None), (3, 0.4, None), (3, 0.39, "confidence"),
                                         (7, 0.99, "eos"), (7, 0.1, "eos")])
def test_adaptive_stops_on_low_confidence_and_eos(token, q, why):
    assert adaptive().stop(token, q) == why


@pytest.mark.parametrize("room,plan", [(100, (4, "gamma")), (5, (4, "gamma")), (4, (3, "room")),
                                       (2, (1, "room")), (1, (1, "room"))])
def test_adaptive_never_drafts_past_the_room_left(room, plan):
    assert adaptive().plan(room) == plan


def test_fixed_is_gamma_every_step_whatever_it_sees():
    policy = WindowPolicy("fixed", gamma=5, threshold=0.9, eos=frozenset({7}))
    for drafted, accepted in [(5, 5), (5, 0), (5, 5), (5, 5)]:
        policy.observe(drafted, accepted)
        assert policy.plan(room=1) == (5, "gamma")
    assert policy.stop(7, 0.0) is None
    assert policy.cut([7, 1, 2, 3, 4], [0.0] * 5, room=1) == (5, "gamma")


@pytest.mark.parametrize("tokens,q,room,cut", [
    ([1, 2, 3, 4], [0.9, 0.9, 0.9, 0.9], 100, (4, "gamma")),
    ([1, 2, 3, 4], [0.9, 0.2, 0.9, 0.9], 100, (2, "confidence")),
    ([1, 7, 3, 4], [0.9, 0.9, 0.9, 0.9], 100, (2, "eos")),
    ([1, 2, 3, 4], [0.9, 0.9, 0.9, 0.9], 3, (2, "room")),
    ([1, 2, 3, 4], [0.9, 0.9, 0.1, 0.9], 3, (2, "room")),  # the cap comes first
])
def test_cut_is_what_the_rollout_would_have_drafted(tokens, q, room, cut):
    assert adaptive().cut(tokens, q, room) == cut


def test_policy_from_settings_and_mirror_cap():
    s = Settings(gamma=3, window="adaptive", window_threshold=0.25, window_min=2, window_max=10)
    p = policy_for(s, {5})
    assert (p.kind, p.length, p.threshold, p.min_len, p.max_len, p.eos) == ("adaptive", 3, 0.25, 2, 10,
                                                                            frozenset({5}))
    assert policy_for(s, (), cap=3).max_len == 3  # Mirror-SD, branch_extend off: branches gamma deep
    assert policy_for(Settings(gamma=6), ()).plan(1) == (6, "gamma")


@pytest.mark.parametrize("verdicts,drafted,accepted,room,plan", [
    ([], 4, 4, 100, (6, "gamma")),  # a branch at the bonus depth: the window after a full accept
    ([], 4, 2, 100, (3, "gamma")),  # at a rejection depth: one shorter
    ([(4, 4), (6, 6)], 8, 8, 100, (8, "gamma")),
    ([], 4, 4, 5, (4, "room")),
])
def test_plan_after_is_the_plan_once_the_verdict_is_observed(verdicts, drafted, accepted, room, plan):
    policy = adaptive()
    for d, a in verdicts:
        policy.observe(d, a)
    before = policy.length
    assert policy.plan_after(drafted, accepted, room) == plan
    assert policy.length == before  # reading it changes nothing
    policy.observe(drafted, accepted)
    assert policy.plan(room) == plan


def test_branch_extend_setting():
    assert Settings().branch_extend == "on"
    with pytest.raises(MirrorSDError, match="branch extend must be on or off"):
        Settings(branch_extend="yes").check("mirror")
    Settings(branch_extend="yes").check("sd")  # SD has no branches
    assert runners.variant("mirror:branch_extend=off") == ("mirror", {"branch_extend": "off"})


@pytest.mark.parametrize("changes", [{"window": "grow"}, {"window_threshold": 1.0},
                                     {"window_threshold": -0.1}, {"window_min": 0},
                                     {"window_min": 5, "window_max": 4}])
def test_bad_window_settings_fail_for_speculative_methods_only(changes):
    for method in SPECULATIVE:
        with pytest.raises(MirrorSDError, match="window"):
            Settings(**changes).check(method)
    Settings(**changes).check("ar")  # AR drafts nothing


# ---------------------------------------------------------------- lossless

def windows_of(events):
    return [(len(v.drafted), v.stop) for v in events if isinstance(v, Verify)]


def check_windows(events, settings: Settings, method: str):
    """Lengths and stop reasons agree between the events and the stats; each window is
    within the policy's bounds."""
    assert not [e for e in events if isinstance(e, Notice)], "the draft lane must not fail"
    st = events[-1].stats
    windows = windows_of(events)
    assert st["window_lengths"] == [n for n, _ in windows]
    assert st["window_stops"] == {r: sum(w == r for _, w in windows) for r in {w for _, w in windows}}
    capped = method == "mirror" and settings.branch_extend == "off"  # branches gamma deep, only cut
    top = settings.gamma if capped or settings.window == "fixed" else settings.window_max
    assert all(1 <= n <= top and why in STOP_REASONS for n, why in windows)
    # the draft spans say how many tokens were drafted (the latency model divides by it)
    label = "fallback" if method == "mirror" else "draft"
    drafted = [int(sp.detail.split()[0]) for sp in events if isinstance(sp, Span) and sp.label == label]
    serial = [len(b.tokens) for b in events if isinstance(b, DraftBranch) and b.status == "serial"]
    assert drafted == (serial[1:] if method == "mirror" else [n for n, _ in windows])
    if method == "mirror":  # the early exit covers exactly the window verified
        starts = [e for e in events if isinstance(e, StepStart)]
        assert [len(e.window) for e in starts] == [n for n, _ in windows]
        for e in (e for e in events if isinstance(e, EarlyExit)):
            assert e.positions == list(range(len(starts[e.step].window) + 1))
        taken = [b for b in events if isinstance(b, DraftBranch) and b.status in ("taken", "serial")]
        assert [b.tokens for b in taken] == [e.window for e in starts]


@pytest.mark.parametrize("method", SPECULATIVE)
@pytest.mark.parametrize("kind", ["perturbed", "random", "same"])
def test_adaptive_greedy_equals_generate(method, kind):
    seen = {}
    for seed in range(4):
        pair = tiny.cached_pair(kind, seed)
        for p in (tiny.prompt(seed, 1), tiny.prompt(seed, 3 + 5 * seed)):
            s = Settings(max_new_tokens=20, gamma=4, window="adaptive", window_threshold=THRESHOLD,
                         window_max=8, kappa=4)
            events = tiny.run(METHODS[method], pair, p, **vars(s))
            assert tiny.finish(events).token_ids == tiny.cached_reference(seed, "qwen", tuple(p), 20)
            check_windows(events, s, method)
            for n, why in windows_of(events):
                seen.setdefault(why, set()).add(n)
    # the runs exercised the policy: windows of several lengths, cut by confidence and by room
    assert {"confidence", "room"} <= set(seen), seen
    assert len(set().union(*seen.values())) >= 3, seen


def taken_windows(events) -> list[int]:
    """Lengths of the windows Mirror-SD took from a precomputed branch (a hit)."""
    return [len(b.tokens) for b in events if isinstance(b, DraftBranch) and b.status == "taken"]


@pytest.mark.parametrize("seed", [0, 1])
def test_mirror_hit_windows_grow_with_the_policy_and_equal_generate(seed):
    """Mirror-SD's windows follow the adaptive policy past gamma, on hits too (the taken
    branch was drafted to the policy's length), and the output is still generate()'s; with
    branch_extend off the same run keeps its windows at most gamma."""
    pair = tiny.pair_same(seed, sharp=20.0)  # a confident draft: full accepts, bonus roots taken
    perturbed = ModelPair(pair.target, tiny.perturb(pair.target, 0.1, seed + 5))  # rejections too
    for p in (pair, perturbed):
        prompt = tiny.prompt(seed, 5)
        ref = tiny.reference_greedy(p.target, prompt, 40)
        lengths = {}
        for extend in ("on", "off"):
            s = Settings(max_new_tokens=40, gamma=3, window="adaptive", window_threshold=0.0, window_max=10,
                         kappa=4, branch_extend=extend)
            events = tiny.run(METHODS["mirror"], p, prompt, **vars(s))
            assert tiny.finish(events).token_ids == ref
            check_windows(events, s, "mirror")
            lengths[extend] = (events[-1].stats["window_lengths"], taken_windows(events))
        assert max(lengths["off"][0]) == 3
        if p is pair:  # every window fully accepted: the schedule 3, 5, 7, 9, 10 as SD's
            assert max(lengths["on"][0]) == 10 > s.gamma and max(lengths["on"][1]) > s.gamma, lengths
            assert len(lengths["on"][0]) < len(lengths["off"][0])  # fewer verifies for the same text


@pytest.mark.parametrize("method", SPECULATIVE)
def test_adaptive_window_stops_at_a_drafted_eos(method):
    p = tiny.prompt(3, 5)
    model, eos, index = tiny.eos_target(3, p)
    pair = ModelPair(model, tiny.perturb(model, 0.0, 99))  # the draft writes the target's text
    ref = tiny.reference_greedy(model, p, 40)
    s = Settings(max_new_tokens=40, gamma=4, window="adaptive", window_threshold=0.0, kappa=4)
    events = tiny.run(METHODS[method], pair, p, **vars(s))
    assert tiny.finish(events).token_ids == ref and ref[-1] == eos
    check_windows(events, s, method)
    last = [v for v in events if isinstance(v, Verify)][-1]
    assert last.stop == "eos" and last.drafted[-1] == eos


@pytest.mark.parametrize("method", SPECULATIVE)
def test_fixed_windows_are_gamma_long(method):
    pair = tiny.cached_pair("perturbed", 1)
    s = Settings(max_new_tokens=17, gamma=3, kappa=4)
    events = tiny.run(METHODS[method], pair, tiny.prompt(1, 6), **vars(s))
    assert windows_of(events) == [(3, "gamma")] * len(windows_of(events)) != []
    check_windows(events, s, method)


def test_ar_reports_no_windows():
    events = tiny.run(METHODS["ar"], tiny.cached_pair("perturbed", 0), tiny.prompt(0, 3), max_new_tokens=4)
    st = events[-1].stats
    assert st["window_lengths"] == [] and st["window_stops"] == {}


# ---------------------------------------------------------------- sampling

V = 12
SEED = 6


@torch.inference_mode()
def marginals(model, prompt_ids, temperature):
    """The target's exact P(1st token) and P(2nd token)."""
    def warp(logits):
        return torch.softmax(logits.double() / temperature, dim=-1)
    p1 = warp(model(torch.tensor([prompt_ids])).logits[0, -1])
    ctx = torch.tensor([prompt_ids + [v] for v in range(V)])
    return p1.tolist(), (p1[:, None] * warp(model(ctx).logits[:, -1])).sum(0).tolist()


@pytest.mark.parametrize("method,runs", [("sd", 400), ("mirror", 300)])
def test_adaptive_sampling_follows_the_target(method, runs):
    pair = tiny.pair_perturbed(SEED, scale=0.2, vocab_size=V, initializer_range=0.3)
    prompt = tiny.prompt(SEED, 4, vocab=V)
    p1, p2 = marginals(pair.target, prompt, 1.0)
    first, second, lengths = [0] * V, [0] * V, set()
    for seed in range(runs):
        s = Settings(max_new_tokens=4, temperature=1.0, gamma=3, window="adaptive", window_threshold=0.3,
                     branch_budget=3, kappa=4, seed=seed)
        events = list(METHODS[method](pair, s).generate(prompt))
        tokens = tiny.finish(events).token_ids
        first[tokens[0]] += 1
        second[tokens[1]] += 1
        lengths |= {n for n, _ in windows_of(events)}
    assert len(lengths) >= 2, lengths  # the windows' lengths did vary with the draft's confidence
    for name, counts, probs in (("1st", first, p1), ("2nd", second, p2)):
        stat, dof = chi_square(counts, probs)
        assert stat < CHI2_CRIT_001[dof], (name, counts, [round(runs * q, 1) for q in probs], stat)


@torch.inference_mode()
def third_marginal(model, prompt_ids, temperature):
    """The target's exact P(3rd token), summed over the first two."""
    def warp(logits):
        return torch.softmax(logits.double() / temperature, dim=-1)
    p1 = warp(model(torch.tensor([prompt_ids])).logits[0, -1])
    p2 = warp(model(torch.tensor([prompt_ids + [v] for v in range(V)])).logits[:, -1])  # [v1, v2]
    ctx = torch.tensor([prompt_ids + [a, b] for a in range(V) for b in range(V)])
    p3 = warp(model(ctx).logits[:, -1]).view(V, V, V)  # [v1, v2, v3]
    return (p1[:, None, None] * p2[:, :, None] * p3).sum((0, 1)).tolist()


def test_extended_branches_sample_from_the_target():
    """Sampling through the new path: gamma 1, so every window past one token a hit hands
    over is a branch drafted beyond gamma (to the policy's length after a full accept). The
    1st to 3rd tokens still follow the target's own distribution."""
    pair = tiny.pair_perturbed(SEED, scale=0.2, vocab_size=V, initializer_range=0.3)
    prompt = tiny.prompt(SEED, 4, vocab=V)
    expected = [*marginals(pair.target, prompt, 1.0), third_marginal(pair.target, prompt, 1.0)]
    counts = [[0] * V for _ in expected]
    runs, long_hits = 300, 0
    for seed in range(runs):
        s = Settings(max_new_tokens=6, temperature=1.0, gamma=1, window="adaptive", window_threshold=0.1,
                     window_max=4, branch_budget=3, kappa=4, seed=seed)
        events = list(METHODS["mirror"](pair, s).generate(prompt))
        tokens = tiny.finish(events).token_ids
        for i, c in enumerate(counts):
            c[tokens[i]] += 1
        long_hits += any(n > s.gamma for n in taken_windows(events))
    assert long_hits >= runs // 10, long_hits  # the path under test was taken often
    for i, (c, probs) in enumerate(zip(counts, expected)):
        stat, dof = chi_square(c, probs)
        assert stat < CHI2_CRIT_001[dof], (i + 1, c, [round(runs * q, 1) for q in probs], stat)


# ---------------------------------------------------------------- the inspector and the strip

@pytest.mark.parametrize("method", SPECULATIVE)
def test_strip_and_inspector_show_each_windows_length_and_stop(method):
    from ui.inspector import render_inspector
    from ui.runs import RunRecord
    from ui.steps import WINDOW_STOPS, render_strip

    s = Settings(max_new_tokens=20, gamma=4, window="adaptive", window_threshold=THRESHOLD, kappa=4)
    events = tiny.run(METHODS[method], tiny.cached_pair("perturbed", 0), tiny.prompt(0, 5), **vars(s))
    rec = RunRecord(method)
    for e in events:
        rec.add(e, 0)
    verifies = [v for v in events if isinstance(v, Verify)]
    strip = render_strip(rec, selected=verifies[0].step)
    marks = re.findall(r'<small class="msd-step-window w-(\w+)">(\d+)d(·?)</small>', strip)
    assert [(why, int(n), dot == "·") for why, n, dot in marks] == [
        (v.stop, len(v.drafted), v.stop != "gamma") for v in verifies]
    for v in verifies:
        page = render_inspector(rec, v.step)
        n = len(v.drafted)
        note = f"window of {n} drafted token{'' if n == 1 else 's'}, stopped: {WINDOW_STOPS[v.stop]}"
        assert html.escape(note) in page


# ---------------------------------------------------------------- the benchmark report

def test_window_stats_by_hand():
    turns = [{"window_lengths": [4, 2, 4], "window_stops": {"gamma": 2, "confidence": 1}},
             {"window_lengths": [1], "window_stops": {"room": 1}}, {"new_tokens": 3}]
    c = window_cell(turns)
    assert c == {"windows": 4, "window_mean": 2.75, "window_hist": {"1": 1, "2": 1, "4": 2},
                 "window_stops": {"gamma": 2, "confidence": 1, "room": 1}}
    assert window_cell([{"new_tokens": 3}])["window_mean"] is None


def test_adaptive_window_variant_is_reported(tmp_path):
    """`sd:window=adaptive` runs next to plain SD; the report gives both methods' window
    lengths and stop reasons, and the adaptive variant's greedy tokens are AR's."""
    assert runners.variant("sd:window=adaptive:window_threshold=0.2") == (
        "sd", {"window": "adaptive", "window_threshold": 0.2})
    methods = ["ar", "sd", "sd:window=adaptive:window_threshold=0.05", "mirror:window=adaptive"]
    results = bench.run_benchmark(bench_pair(), load_questions(SAMPLE)[:2], methods,
                                  Settings(max_new_tokens=NEW, gamma=3), out_dir=tmp_path, progress=False)
    overall = results["summary"]["overall"]
    assert overall["ar"]["windows"] == 0
    assert set(overall["sd"]["window_hist"]) == {"3"} and set(overall["sd"]["window_stops"]) == {"gamma"}
    for m in methods[1:]:
        c = overall[m]
        assert c["mismatches"] == 0 and c["checked"] == 2
        assert sum(c["window_hist"].values()) == sum(c["window_stops"].values()) == c["windows"] > 0
    assert len(overall[methods[2]]["window_hist"]) >= 2  # the adaptive windows did vary
    md = (tmp_path / "summary.md").read_text()
    section = md.split("## Draft windows")[1].split("##")[0]
    assert "| SD |" in section and all(f"| {m} |" in section for m in methods[2:])
    assert "| AR |" not in section  # AR drafts no windows
    assert "gamma" in section and "confidence" in section
