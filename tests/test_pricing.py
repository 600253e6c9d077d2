"""Priced windows (engine/pricing.py, windows.py `priced`) and the prompt-lookup proposer
(proposers.py): the pricing's arithmetic, the policy's decisions (decoding included, and the
probe that leaves decoding again), and that SD and Mirror-SD stay lossless with them: greedy
output equal to transformers' generate() on tiny float64 models, runs with plain decode steps
and looked-up windows among them, and sampling that follows the target's distribution."""
import html

import pytest

from mirror_sd.bench import runners
from mirror_sd.engine import pricing
from mirror_sd.engine.events import Commit, DraftBranch, Span, Verify
from mirror_sd.engine.pricing import Costs, PositionAcceptance, Prices, best_window, expected_tokens
from mirror_sd.engine.proposers import find_continuation, lookup_window
from mirror_sd.engine.registry import METHODS
from mirror_sd.engine.settings import Settings
from mirror_sd.engine.windows import FIRST_PROBE, PROBE_AFTER, WindowPolicy, policy_for
from mirror_sd.errors import MirrorSDError

import tiny
from tiny import CHI2_CRIT_001, chi_square, one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# ---------------------------------------------------------------- the arithmetic


def test_expected_tokens_by_hand():
    assert expected_tokens([]) == 1.0
    assert expected_tokens([0.5]) == 1.5
    assert expected_tokens([0.5, 0.5]) == pytest.approx(1.75)
    assert expected_tokens([1.0, 1.0, 1.0]) == 4.0


def test_verify_cost_measured_interpolated_extrapolated():
    p = Prices([(1, 0.10), (3, 0.14), (5, 0.20)], {})
    assert p.decode_s == 0.10 and p.verify_s(3) == 0.14
    assert p.verify_s(4) == pytest.approx(0.17)  # between 3 and 5
    assert p.slope() == pytest.approx(0.025)  # least squares over rows 1, 3, 5
    assert p.verify_s(7) == pytest.approx(0.25)  # along the slope from 5
    seeded = Prices([(5, 0.14)], {})  # no decode measured: the seed's per-row share
    assert seeded.decode_s == pytest.approx(0.14 / 1.4)
    assert seeded.draft_s("draft") == pytest.approx(pricing.SEED_DRAFT_SHARE * 0.1)
    assert seeded.draft_s("lookup") == 0.0
    assert Prices([], {}).decode_s == 1.0


def test_costs_are_running_medians():
    c = Costs()
    for s in (0.1, 0.1, 5.0):  # one outlier does not move the median
        c.add_verify(1, s)
    c.add_draft("draft", 0.3, 3)
    c.add_draft("draft", 0.0, 0)  # nothing drafted: not a measurement
    p = c.snapshot()
    assert p.decode_s == 0.1 and p.draft_s("draft") == pytest.approx(0.1)


def test_acceptance_per_position_moves_from_the_seed():
    a = PositionAcceptance(0.6)
    assert a.rates(3) == pytest.approx([0.6, 0.6, 0.6])
    for _ in range(10):
        a.observe(3, 3)
    assert all(r > 0.9 for r in a.rates(3))
    for _ in range(10):
        a.observe(3, 0)
    low = a.rates(1)[0]
    assert low < 0.4  # ten rejections outweigh ten older full accepts (they decay)
    a.observe(0, 0)  # a decode step says nothing of acceptance
    assert a.rates(1)[0] == low


def test_calibration_learns_how_far_to_trust_a_probability():
    c = pricing.Calibration()
    assert c.accept(0.5) == pytest.approx(0.7) and c.accept(1.0) == pytest.approx(1.0)  # the prior
    for _ in range(20):
        c.observe([0.95, 0.3, 0.95], 1)  # the confident token kept, the unsure one rejected
    assert c.accept(0.96) > 0.9 and c.accept(0.3) < 0.2
    assert c.accept(0.97) == pytest.approx(c.accept(0.96), abs=1e-3)  # one bin: the counts outweigh the prior
    before = c.accept(0.5)
    c.observe([0.95, 0.3, 0.5], 1)  # the third token was never judged: its bin is untouched
    assert c.accept(0.5) == before


@pytest.mark.parametrize("survival,a_next,more", [
    ([0.95, 0.9], 0.95, True),  # a window still accepted at this rate pays for one more token
    ([0.95, 0.3], 0.95, False),  # an unsure token: what follows it is seldom kept
    ([0.95, 0.9], 0.2, False),
])
def test_worth_more(survival, a_next, more):
    p = Prices([(1, 0.1), (9, 0.14)], {"draft": 0.02})
    assert pricing.worth_more(p, "draft", survival, a_next) is more


@pytest.mark.parametrize("draft_s,accept,best", [
    (0.03, 0.99, 4),  # a cheap, reliable draft: draft the longest window offered
    (0.06, 0.2, 0),  # a draft mostly rejected: decode
    (0.12, 0.7, 0),  # a draft as slow as the target: decode
])
def test_best_window(draft_s, accept, best):
    p = Prices([(1, 0.1), (5, 0.12)], {"draft": draft_s})
    choice, table = best_window(p, {"draft": ([accept] * 4, 1, 4)})
    assert choice.k == best and len(table) == 5
    assert choice.rate == max(o.rate for o in table)


def test_explain_says_what_decoding_saves():
    p = Prices([(1, 0.08), (4, 0.1)], {"draft": 0.04})
    best, table = best_window(p, {"draft": ([0.3] * 3, 1, 3)})
    text = pricing.explain(best, table)
    assert best.k == 0 and text.startswith("drafting ") and text.endswith("decoded instead")
    assert "ms for" in text and "expected tokens" in text and "decoding: 1 in 80 ms" in text


# ---------------------------------------------------------------- the policy


def priced(**kw) -> WindowPolicy:
    return WindowPolicy(**{"kind": "priced", "gamma": 4, "threshold": 0.0, "max_len": 6, **kw})


def teach(policy: WindowPolicy, decode=0.1, draft=0.06, verify5=0.12):
    policy.costs.add_verify(1, decode)
    policy.costs.add_verify(5, verify5)
    policy.costs.add_draft("draft", draft, 1)


def test_priced_decodes_when_drafting_does_not_pay_and_probes_later():
    policy = priced()
    teach(policy, draft=0.07)  # pays only if accepted far more often than the seed says
    for gap in (FIRST_PROBE, PROBE_AFTER):  # the run's first probe comes early, later ones later
        for _ in range(gap):
            assert policy.plan(100) == (0, "price")
            assert "decoded instead" in policy.note
            policy.observe(0, 0)
        k, reason = policy.plan(100)  # the probe: a short window to measure the acceptance again
        assert reason == "probe" and k == 2 and policy.note.startswith("probing: ")
        policy.observe(k, 0)  # rejected: the next probe waits longer
    assert policy.probe_gap == 2 * PROBE_AFTER
    for _ in range(2 * PROBE_AFTER):
        assert policy.plan(100)[0] == 0
        policy.observe(0, 0)
    assert policy.plan(100)[1] == "probe"


def test_priced_leaves_decoding_when_the_draft_is_accepted():
    policy = priced()
    teach(policy, draft=0.03)
    for _ in range(3):
        policy.observe(2, 0)  # low acceptance: decode
    assert policy.plan(100)[0] == 0
    for _ in range(FIRST_PROBE):
        policy.observe(0, 0)
    k, reason = policy.plan(100)
    assert reason == "probe"
    for _ in range(6):
        policy.observe(k, k)  # the probes are accepted whole
        k, reason = policy.plan(100)
    assert k >= 3 and reason == "price" and policy.probe_gap == PROBE_AFTER


def test_the_drafts_catch_up_is_priced_over_the_room_left():
    """A draft that has not read the prompt yet must feed it first: its windows carry that
    cost, spread over the tokens the run has left; in a short run no probe pays for it."""
    policy = priced()
    teach(policy, draft=0.03)
    for _ in range(5):
        policy.observe(4, 4)
    assert policy.plan(100, behind=1)[0] > 0
    assert policy.plan(100, behind=300)[0] > 0  # a long run amortizes the prefill
    assert policy.plan(8, behind=300) == (0, "price")  # a short one does not
    policy.costs.add_catchup(3.0, 300)  # measured: 10 ms a token
    assert policy.costs.snapshot().catchup_s(300) == pytest.approx(3.0)
    assert policy.costs.snapshot().catchup_s(2) == 0.0
    dear = priced()
    teach(dear, draft=0.07)
    for _ in range(FIRST_PROBE):
        dear.observe(0, 0)
    assert dear.plan(100, behind=1) == (2, "probe")
    assert dear.plan(20, behind=400) == (0, "price")  # the probe could never pay for the prefill


def test_priced_room_zero_floor_and_plan_after():
    policy = priced()
    teach(policy, draft=0.01)
    for _ in range(5):
        policy.observe(4, 4)
    assert policy.plan(100) == (6, "price")
    assert policy.plan(3) == (2, "room")
    mirror = priced(zero=False)
    teach(mirror, draft=0.5)
    assert mirror.plan(100)[0] == 1  # a policy that may not decode drafts at least one token
    before = [a.rates(6) for a in policy.acceptance.values()]
    after = policy.plan_after(6, 0, 100)
    assert [a.rates(6) for a in policy.acceptance.values()] == before  # reading it changes nothing
    policy.observe(6, 0)
    assert policy.plan(100) == after


def test_priced_prices_a_lookup_beside_the_draft():
    policy = priced()
    teach(policy, draft=0.2)  # the draft model does not pay, a free lookup does
    assert policy.plan(100, lookup=0) == (0, "price")
    for _ in range(3):
        policy.observe(3, 3, "lookup")  # lookups were accepted: its acceptance, not the draft's
    assert policy.accepting("lookup").rates(1)[0] > 0.7 > policy.accepting("draft").rates(1)[0]
    k, reason = policy.plan(100, lookup=3)
    assert policy.source == "lookup" and k == 3 and reason == "match"
    assert "(lookup)" in policy.note


def test_priced_settings():
    s = Settings(window="priced", window_max=9)
    p = policy_for(s)
    assert p.priced and p.zero and not p.fixed and p.max_len == 9
    Settings(window="priced").check("sd")
    with pytest.raises(MirrorSDError, match="proposer must be one of draft, lookup"):
        Settings(proposer="ngram").check("sd")
    Settings(proposer="ngram").check("ar")  # AR drafts nothing
    assert runners.variant("sd:proposer=lookup:window=priced") == ("sd", {"proposer": "lookup",
                                                                          "window": "priced"})


def test_cli_unknown_proposer_is_one_line_before_loading(capsys):
    from mirror_sd import cli
    rc = cli.main(["generate", "--target", "/nonexistent", "--draft", "/nonexistent", "--prompt", "x",
                   "--proposer", "ngram"])
    err = capsys.readouterr().err
    assert rc == 2 and "proposer must be one of draft, lookup" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------- prompt lookup


@pytest.mark.parametrize("ids,limit,out", [
    ([1, 2, 3, 4, 1, 2, 3], 3, [4, 1, 2]),  # the 3-gram 1 2 3 recurs
    ([1, 2, 3, 9, 2, 3, 5, 2, 3], 2, [5, 2]),  # the latest occurrence wins
    ([5, 6, 7, 8, 7], 4, []),  # a single token recurring is not enough
    ([5, 6, 7, 8, 6, 7], 4, [8, 6, 7]),  # a 2-gram is
    ([1, 2, 3, 4], 3, []),  # nothing recurs
    ([4], 3, []),
])
def test_find_continuation(ids, limit, out):
    assert find_continuation(ids, limit) == out


def test_lookup_window_is_one_hot_and_stops_at_eos():
    w = lookup_window([3, 7, 5], 10, stop=lambda t, q: "eos" if t == 7 else None)
    assert w.tokens == [3, 7] and w.stop == "eos" and w.source == "lookup"
    assert w.q_rows.shape == (2, 10) and w.q_probs == [1.0, 1.0] and float(w.q_rows.sum()) == 2.0


# ---------------------------------------------------------------- lossless


@pytest.fixture
def fixed_prices(monkeypatch):
    """Costs as if measured on a machine where a draft forward costs `draft` of a target
    decode (its catch-up free): the tiny models' own timings would make every choice a near
    tie."""
    def set_prices(draft: float, lookup: float = 0.0):
        prices = Prices([(1, 1.0), (2, 1.05), (9, 1.4)], {"draft": draft, "lookup": lookup, "catchup": 0.0})
        monkeypatch.setattr(Costs, "snapshot", lambda self: prices)
    return set_prices


def steps_of(events):
    verifies = [v for v in events if isinstance(v, Verify)]
    return [(len(v.drafted), v.source, v.stop) for v in verifies]


def check_priced_events(events, method):
    """Every decode step is a Verify with no drafted token, its reason and a plain commit;
    windows and counts agree with the stats."""
    st = tiny.finish(events).stats
    verifies = [v for v in events if isinstance(v, Verify)]
    assert st["window_lengths"] == [len(v.drafted) for v in verifies]
    commits = {c.step: c for c in events if isinstance(c, Commit)}
    for v in verifies:
        assert v.price, "a priced window says why it has its length"
        if not v.drafted:
            assert v.kind == "plain" and v.stop == "price"
            assert "decoded instead" in v.price
            assert commits[v.step].sources == ["plain"]
    decodes = [sp for sp in events if isinstance(sp, Span) and sp.label == "decode"]
    assert len(decodes) == sum(1 for v in verifies if not v.drafted)
    counts = st.get("proposers", {})
    if method == "sd":
        assert sum(r["windows"] for r in counts.values()) == len(verifies)
        assert counts.get("decode", {}).get("windows", 0) == len(decodes)


@pytest.mark.parametrize("method", ["sd", "mirror"])
@pytest.mark.parametrize("proposer", ["draft", "lookup"])
def test_priced_greedy_equals_generate(method, proposer, fixed_prices):
    kinds = {}
    for draft_cost in (0.15, 0.6):  # cheap: mostly drafted; dear: mostly decoded, with probes
        fixed_prices(draft_cost)
        for seed in range(3):
            pair = tiny.cached_pair("perturbed", seed)
            for p in (tiny.prompt(seed, 3), tiny.prompt(seed, 6 + 4 * seed)):
                p = p + p[:3]  # a prompt with an n-gram to look up
                s = Settings(max_new_tokens=24, gamma=3, window="priced", window_threshold=0.0,
                             window_max=6, kappa=4, proposer=proposer)
                events = tiny.run(METHODS[method], pair, p, **vars(s))
                assert tiny.finish(events).token_ids == tiny.cached_reference(seed, "qwen", tuple(p), 24)
                check_priced_events(events, method)
                for n, source, stop in steps_of(events):
                    kinds.setdefault((n > 0, source, stop), 0)
                    kinds[(n > 0, source, stop)] += 1
    seen = {k[2] for k in kinds}
    assert "price" in seen, kinds
    # plain decode steps and the probes that leave them happened (Mirror-SD too: its step then
    # decodes with the lanes one after the other)
    assert (False, "", "price") in kinds and "probe" in seen, kinds
    if proposer == "lookup":
        assert any(src == "lookup" for _, src, _ in kinds), kinds


def test_lookup_greedy_equals_generate_under_fixed_and_adaptive_windows():
    for seed in range(2):
        pair = tiny.cached_pair("random", seed)  # a useless draft model: lookups do the work
        p = tiny.prompt(seed, 8)
        p = p + p
        ref = tiny.cached_reference(seed, "qwen", tuple(p), 20)
        for method in ("sd", "mirror"):
            for window in ("fixed", "adaptive"):
                s = Settings(max_new_tokens=20, gamma=3, window=window, window_threshold=0.0, kappa=4,
                             proposer="lookup")
                events = tiny.run(METHODS[method], pair, p, **vars(s))
                assert tiny.finish(events).token_ids == ref
                if method == "sd":
                    sources = {v.source for v in events if isinstance(v, Verify)}
                    assert "lookup" in sources, sources
                    spans = [sp.label for sp in events if isinstance(sp, Span) and sp.lane == "draft"]
                    assert "lookup" in spans


V = 12
SEED = 6


@pytest.mark.parametrize("method", ["sd", "mirror"])
@pytest.mark.parametrize("proposer,draft_cost", [("draft", 0.45), ("lookup", 0.6)])
def test_priced_sampling_follows_the_target(method, proposer, draft_cost, fixed_prices):
    """Sampled SD and Mirror-SD under priced windows, decode steps and (lookup) one-hot
    proposals among them: the 1st and 2nd tokens follow the target's own distribution."""
    fixed_prices(draft_cost)
    pair = tiny.pair_perturbed(SEED, scale=0.2, vocab_size=V, initializer_range=0.3)
    prompt = tiny.prompt(SEED, 6, vocab=V)
    prompt = prompt + prompt[:2]
    p1, p2 = tiny.exact_marginals(pair.target, prompt, 1.0, V)
    first, second, kinds = [0] * V, [0] * V, set()
    runs = 400
    for seed in range(runs):
        s = Settings(max_new_tokens=2, temperature=1.0, gamma=2, window="priced", window_threshold=0.0,
                     window_max=3, proposer=proposer, seed=seed)
        events = list(METHODS[method](pair, s).generate(prompt))
        tokens = tiny.finish(events).token_ids
        first[tokens[0]] += 1
        second[tokens[1]] += 1
        kinds |= {(len(v.drafted) > 0, v.source) for v in events if isinstance(v, Verify)}
    assert (True, "lookup" if proposer == "lookup" else "draft") in kinds, kinds
    for name, counts, probs in (("1st", first, p1), ("2nd", second, p2)):
        stat, dof = chi_square(counts, probs)
        assert stat < CHI2_CRIT_001[dof], (name, counts, [round(runs * q, 1) for q in probs], stat)


@pytest.mark.parametrize("method", ["sd", "mirror"])
def test_decode_steps_sample_from_the_target(method, fixed_prices):
    """Every step decodes (a draft that never pays, no probe within two tokens): the tokens
    are the target's own samples."""
    fixed_prices(5.0)
    pair = tiny.pair_perturbed(SEED, scale=0.2, vocab_size=V, initializer_range=0.3)
    prompt = tiny.prompt(SEED, 4, vocab=V)
    tiny.assert_first_two_follow_the_target(METHODS[method], pair, prompt, V, 300, 1.0, window="priced")


# ---------------------------------------------------------------- the page


def test_strip_and_inspector_show_a_decode_step_and_its_reason(fixed_prices):
    from ui.inspector import render_inspector
    from ui.runs import RunRecord
    from ui.steps import render_strip

    fixed_prices(0.6)
    s = Settings(max_new_tokens=12, gamma=3, window="priced", kappa=4)
    events = tiny.run(METHODS["sd"], tiny.cached_pair("perturbed", 0), tiny.prompt(0, 5), **vars(s))
    rec = RunRecord("sd")
    for e in events:
        rec.add(e, 0)
    decoded = next(v for v in events if isinstance(v, Verify) and not v.drafted)
    assert ">0d·<" in render_strip(rec, selected=decoded.step)
    page = render_inspector(rec, decoded.step)
    from ui.steps import price_figures
    lead, rows = price_figures(decoded.price)
    assert rows, decoded.price  # the engine's words parse into figures
    assert html.escape(lead) in page and "decoded one token instead" in page
    for name, value in rows:  # every figure of the price is on the page, with its name
        assert f"<th>{html.escape(name)}</th><td>{html.escape(value)}</td>" in page
    assert not any(isinstance(b, DraftBranch) and b.step == decoded.step for b in events)


def test_empty_window_verify_is_a_plain_step():
    from mirror_sd.engine.drafting import Window
    w = Window.empty("price", "why")
    assert w.tokens == [] and w.q_probs == [] and w.stop == "price" and w.note == "why" and w.source == ""


@pytest.mark.parametrize("method", ["sd", "mirror"])
def test_a_pairs_runs_share_their_measured_costs(method):
    """The costs priced windows read are kept with the pair (windows.pair_costs): after one
    run, the next starts from the target forwards and draft tokens it measured, not from the
    seeds; a pair without an info dict gets fresh costs; the tokens stay generate()'s."""
    from types import SimpleNamespace

    from mirror_sd.engine.windows import pair_costs
    pair = tiny.pair_perturbed(7)
    pair.info.pop("prices", None)
    p = tiny.prompt(7, 6)
    s = Settings(max_new_tokens=24, gamma=3, window="adaptive")
    first = tiny.finish(list(METHODS[method](pair, s).generate(p)))
    assert first.token_ids == tiny.reference_greedy(pair.target, p, 24)
    (key,) = pair.info["prices"]
    assert key[0] == method
    prices = pair.info["prices"][key].snapshot()
    assert prices.points and prices.draft.get("draft")  # measured, though the run was adaptive
    priced = Settings(max_new_tokens=24, gamma=3, window="priced", proposer="draft")
    assert pair_costs(pair, *key) is pair.info["prices"][key]
    second = tiny.finish(list(METHODS[method](pair, priced).generate(p)))
    assert second.token_ids == first.token_ids
    assert pair_costs(SimpleNamespace(info=None), "sd").snapshot().points == []


def test_a_steps_host_time_is_priced_into_each_window():
    """Each step's time outside its forwards (measured per drafted and per decoded step) is
    added to the window's cost: a window that beats decoding on forwards alone does not when
    its step costs more host time than a decode step."""
    costs = Costs()
    for _ in range(3):
        costs.add_verify(1, 0.030)
        costs.add_verify(3, 0.036)
        costs.add_draft("draft", 0.024, 2)
    rates = {"draft": ([0.7] * 4, 1, 4)}
    before, _ = best_window(costs.snapshot(), rates)
    assert before.k > 0  # forwards alone: 2 tokens in about 60 ms against 1 in 30
    for _ in range(3):
        costs.add_host(True, 0.012)
        costs.add_host(False, 0.002)
    prices = costs.snapshot()
    assert prices.host_s(True) == pytest.approx(0.012) and prices.host_s(False) == pytest.approx(0.002)
    after, table = best_window(prices, rates)
    decode = next(o for o in table if o.k == 0)
    assert decode.seconds == pytest.approx(0.032)
    two = next(o for o in table if o.k == 2)
    assert two.seconds == pytest.approx(2 * 0.012 + 0.036 + 0.012)
    assert after.k == 0


def test_sd_measures_its_steps_host_time(monkeypatch):
    """A real SD run feeds the host time of its drafted and decoded steps to the costs."""
    pair = tiny.pair_perturbed(3)
    pair.info.pop("prices", None)
    s = Settings(max_new_tokens=20, gamma=3, window="adaptive")
    list(METHODS["sd"](pair, s).generate(tiny.prompt(3, 6)))
    (costs,) = pair.info["prices"].values()
    prices = costs.snapshot()
    assert 0.0 < prices.host_s(True) < 1.0


def test_a_probe_hopes_for_what_the_pair_has_shown():
    """Before a proposer's windows have shown their acceptance a probe hopes for PROBE_ACCEPT;
    after, for that acceptance plus PROBE_MARGIN (never more than PROBE_ACCEPT); the acceptance
    is kept with the pair across runs (windows.pair_acceptance)."""
    from types import SimpleNamespace

    from mirror_sd.engine.windows import shared_with_pair
    pair = SimpleNamespace(info={})
    policy = shared_with_pair(priced(), pair, "sd", "full", "off")
    assert policy.hoped("draft") == pricing.PROBE_ACCEPT
    for _ in range(8):
        policy.observe(4, 1, "draft")  # 1 of 4 taken: about 0.5 per position reached
    shown = policy.accepting("draft").pooled()
    assert shown < 0.6
    assert policy.hoped("draft") == pytest.approx(shown + pricing.PROBE_MARGIN)
    again = shared_with_pair(priced(), pair, "sd", "full", "off")  # the pair's next run
    assert again.accepting("draft") is policy.accepting("draft")
    assert shared_with_pair(priced(), pair, "sd", "auto", "off").hoped("draft") == pricing.PROBE_ACCEPT
    # Mirror-SD verifies the same draft's windows: it reads what SD's runs showed (its costs apart)
    mirror = shared_with_pair(priced(), pair, "mirror", "full", "off", "on")
    assert mirror.accepting("draft") is policy.accepting("draft") and mirror.costs is not policy.costs


def test_a_decode_is_priced_at_what_the_pairs_decodes_cost():
    """One running figure for a plain decode on the pair: AR's steps feed it, and a priced run
    that has not decoded yet reads it (rather than a guess from its verify forwards)."""
    from mirror_sd.engine.windows import pair_costs, pair_decode
    pair = tiny.pair_perturbed(2)
    pair.info = {}
    events = tiny.run(METHODS["ar"], pair, tiny.prompt(2, 5), max_new_tokens=8)
    decodes = [sp.end_ns - sp.start_ns for sp in events if isinstance(sp, Span) and sp.label == "decode"]
    assert len(decodes) == 7 and len(pair_decode(pair).values) == 7
    for key in (("sd", "full", "off"), ("mirror", "full", "off", "on")):
        prices = pair_costs(pair, *key).snapshot()
        assert prices.points[0] == (1, pytest.approx(sorted(decodes)[3] / 1e9))
        assert prices.decode_s == prices.points[0][1]


def test_a_draft_priced_too_dear_by_earlier_runs_is_probed_and_measured_again():
    """Costs kept across runs are a prior: a run whose earlier runs measured the draft on a
    busier machine (dearer than drafting could ever pay) still probes once, hoping for the
    seeds' price, and its first own measurement replaces the stale history rather than
    joining its median."""
    from types import SimpleNamespace

    from mirror_sd.engine.windows import shared_with_pair
    pair = SimpleNamespace(info={})
    first = shared_with_pair(priced(), pair, "sd", "full", "off")
    first.costs.add_verify(1, 0.1)
    for _ in range(9):
        first.costs.add_draft("draft", 0.5, 1)  # five decodes per drafted token: never pays
    stale = shared_with_pair(priced(), pair, "sd", "full", "off")  # the pair's next run
    assert stale.costs is first.costs and stale.costs.from_earlier_runs("draft")
    assert stale.costs.snapshot().draft_s("draft") == pytest.approx(0.5)  # the prior, until measured
    plans = []
    for _ in range(FIRST_PROBE + 1):
        plans.append(stale.plan(100))
        if plans[-1][0] == 0:
            stale.observe(0, 0)
    assert plans[-1] == (2, "probe"), plans
    stale.costs.add_draft("draft", 0.06, 2)  # the probe's measurement, this run's first
    assert not stale.costs.from_earlier_runs("draft")
    assert stale.costs.snapshot().draft_s("draft") == pytest.approx(0.03)  # replaced, not a median with 0.5
    # without the stale prior (measured in this run) the same dear cost is not probed
    dear = priced()
    dear.costs.add_verify(1, 0.1)
    dear.costs.add_draft("draft", 0.5, 1)
    for _ in range(FIRST_PROBE):
        dear.observe(0, 0)
    assert dear.plan(100) == (0, "price")
