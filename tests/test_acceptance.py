"""Table tests of the pure acceptance rule (mirror_sd/engine/acceptance.py) and the warpers.

Greedy: accept d_i while d_i == argmax p_i, then the target's argmax (correction or bonus).
Sampling: accept with min(1, p/q), resample from normalize(max(0, p - q)) at the first
rejection, bonus from p_{gamma+1}; checked exactly on a 5-token vocabulary with a chi-square
test of the first emitted token against p[0] (the rule's whole point: it is distributed as p).
"""
import math

import pytest
import torch

from mirror_sd.engine.acceptance import (Sampling, Verdict, probs_from_logits, residual, verify,
                                  verify_greedy, verify_sampling)
from mirror_sd.engine.drafting import serial_rollout, to_probs
from mirror_sd.engine.lanes import Lane

import tiny
from tiny import CHI2_CRIT_001, chi_square, one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

def rows(*argmaxes, vocab=6, seed=0):
    """Logits [len, vocab] with the given argmax per row (random otherwise)."""
    g = torch.Generator().manual_seed(seed)
    out = torch.randn(len(argmaxes), vocab, generator=g, dtype=torch.float64)
    for i, a in enumerate(argmaxes):
        out[i, a] = out[i].max() + 1.0 + i * 0.1
    return out


# ---------------------------------------------------------------- greedy

GREEDY_TABLE = [
    # name, drafted, argmax per row (gamma+1 rows), expected verdict
    ("perfect match + bonus", [3, 1, 4], [3, 1, 4, 5], Verdict(3, 5, True)),
    ("early mismatch", [3, 1, 4], [3, 2, 4, 5], Verdict(1, 2, False)),
    ("mismatch at the last drafted", [3, 1, 4], [3, 1, 0, 5], Verdict(2, 0, False)),
    ("mismatch at the first token", [3, 1, 4], [0, 1, 4, 5], Verdict(0, 0, False)),
    ("all rejected", [1, 1, 1], [2, 3, 4, 5], Verdict(0, 2, False)),
    ("empty draft: just the bonus", [], [4], Verdict(0, 4, True)),
    ("gamma 1 accepted", [2], [2, 0], Verdict(1, 0, True)),
]


@pytest.mark.parametrize("name,drafted,argmaxes,expected", GREEDY_TABLE, ids=[t[0] for t in GREEDY_TABLE])
def test_verify_greedy_table(name, drafted, argmaxes, expected):
    logits = rows(*argmaxes)
    assert verify_greedy(drafted, logits) == expected
    # verify() dispatches to the greedy rule for temperature 0, whatever q and generator are
    q = torch.full((len(drafted), 6), 1 / 6, dtype=torch.float64)
    assert verify(drafted, logits, q, Sampling(), torch.Generator().manual_seed(1)) == expected


def test_verify_greedy_ignores_draft_probabilities():
    """Greedy acceptance depends on the target's argmax only (q may even be garbage)."""
    logits = rows(3, 1, 4, 5)
    q = torch.zeros(3, 6, dtype=torch.float64)
    assert verify([3, 1, 4], logits, q, Sampling(temperature=0.0), None) == Verdict(3, 5, True)


# ---------------------------------------------------------------- sampling, exact cases

def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_sampling_p_equals_q_accepts_everything():
    g = gen(0)
    for trial in range(200):
        p = torch.softmax(torch.randn(4, 7, generator=g, dtype=torch.float64), -1)
        drafted = [int(torch.multinomial(p[i], 1, generator=g)) for i in range(3)]
        v = verify_sampling(drafted, p, p[:3].clone(), gen(1000 + trial))
        assert v.accepted == 3 and v.bonus
        assert p[3, v.token] > 0


def test_sampling_token_p_never_emits_is_always_rejected():
    """q puts mass on token 2 where p has none: d=2 is always rejected, and the resampled token
    comes from the residual normalize(max(0, p - q)) = p here (q and p have disjoint support)."""
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    tokens = []
    for seed in range(400):
        v = verify_sampling([2], p, q, gen(seed))
        assert v.accepted == 0 and not v.bonus
        tokens.append(v.token)
    assert set(tokens) == {0, 1}
    assert 150 < tokens.count(0) < 250  # Binomial(400, 0.5): 5 sigma is +-50


def test_sampling_resample_is_the_residual_exactly():
    """p = [.6, .4, 0], q = [.6, 0, .4]: residual = [0, 1, 0], so every rejection of d=2 (p=0)
    yields token 1, never 0 (p-q = 0 there) nor 2."""
    p = torch.tensor([[0.6, 0.4, 0.0], [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64)
    q = torch.tensor([[0.6, 0.0, 0.4]], dtype=torch.float64)
    for seed in range(200):
        v = verify_sampling([2], p, q, gen(seed))
        assert v == Verdict(0, 1, False)


def test_sampling_rejection_position_and_prefix():
    """Accepted prefix: p >= q on the first two tokens is always accepted; the third has p=0."""
    p = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]],
                     dtype=torch.float64)
    q = torch.tensor([[0.0, 1.0, 0.0], [0.9, 0.0, 0.1], [0.0, 1.0, 0.0]], dtype=torch.float64)
    for seed in range(100):
        v = verify_sampling([1, 2, 1], p, q, gen(seed))
        assert v == Verdict(2, 0, False)


def test_sampling_bonus_from_last_row():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    q = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)
    for seed in range(50):
        assert verify_sampling([1], p, q, gen(seed)) == Verdict(1, 2, True)


def test_sampling_empty_draft_samples_first_row():
    p = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    assert verify_sampling([], p, torch.zeros(0, 3, dtype=torch.float64), gen(0)) == Verdict(0, 2, True)


def test_residual_values():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
    q = torch.tensor([0.1, 0.5, 0.2, 0.2], dtype=torch.float64)
    r = residual(p, q)
    assert torch.allclose(r, torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64))
    q2 = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64)
    r2 = residual(p, q2)  # max(0, p - q) = [.25, .05, 0, 0]
    assert torch.allclose(r2, torch.tensor([0.25 / 0.3, 0.05 / 0.3, 0.0, 0.0], dtype=torch.float64))


@pytest.mark.parametrize("q_kind", ["equal", "dominating"])
def test_residual_guard_all_zero(q_kind):
    """No residual mass (p == q, or q >= p everywhere through rounding): a proper distribution
    comes back (finite, sums to 1), never NaN from 0/0."""
    p = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    q = p.clone() if q_kind == "equal" else p + 1e-3
    r = residual(p, q)
    assert torch.isfinite(r).all()
    assert math.isclose(float(r.sum()), 1.0, rel_tol=1e-12)
    assert (r >= 0).all()
    # and the sampler can draw from it
    assert 0 <= int(torch.multinomial(r, 1, generator=gen(0))) < 3


def test_sampling_acceptance_with_zero_residual_at_rounding():
    """p == q up to rounding on the rejected row: verify_sampling must still return a valid
    token (the residual guard), never raise on an all-zero multinomial."""
    p = torch.tensor([[0.25, 0.25, 0.5], [1.0, 0.0, 0.0]], dtype=torch.float64)
    q = p[:1] * (1 + 1e-15)
    for seed in range(100):
        v = verify_sampling([2], p, q, gen(seed))
        assert 0 <= v.token < 3


# ---------------------------------------------------------------- sampling, distribution

EXACT_CASES = {
    # p: 2 rows over 5 tokens; q: 1 row (the draft distribution of d_1)
    "overlapping": ([[0.35, 0.25, 0.2, 0.15, 0.05], [0.1, 0.2, 0.3, 0.2, 0.2]],
                    [0.1, 0.1, 0.2, 0.3, 0.3]),
    "disjoint-ish": ([[0.5, 0.3, 0.2, 0.0, 0.0], [0.0, 0.0, 0.0, 0.5, 0.5]],
                     [0.05, 0.05, 0.1, 0.4, 0.4]),
    "q-misses-p-mass": ([[0.1, 0.2, 0.3, 0.4, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]],
                        [0.0, 0.5, 0.0, 0.25, 0.25]),
}


@pytest.mark.parametrize("case", list(EXACT_CASES))
def test_sampling_first_token_is_distributed_as_p(case):
    """Draw d ~ q with its own generator, verify with another; the first emitted token (d if
    accepted, else the residual sample) must follow p[0] exactly; the bonus after an accepted
    d must follow p[1]; the acceptance rate must be sum(min(p0, q))."""
    p_rows, q_row = EXACT_CASES[case]
    p = torch.tensor(p_rows, dtype=torch.float64)
    q = torch.tensor([q_row], dtype=torch.float64)
    n = 8_000
    draft_gen, verify_gen = gen(11), gen(22)
    drafts = torch.multinomial(q[0], n, replacement=True, generator=draft_gen).tolist()
    first, bonus, accepted = [0] * 5, [0] * 5, 0
    for d in drafts:
        v = verify_sampling([d], p, q, verify_gen)
        if v.accepted:
            first[d] += 1
            bonus[v.token] += 1
            accepted += 1
        else:
            first[v.token] += 1
    stat, dof = chi_square(first, p_rows[0])
    assert stat < CHI2_CRIT_001[dof], f"first token {first} vs p0 {p_rows[0]}: chi2 {stat:.1f} dof {dof}"
    stat, dof = chi_square(bonus, p_rows[1])
    assert stat < CHI2_CRIT_001[dof], f"bonus {bonus} vs p1 {p_rows[1]}: chi2 {stat:.1f} dof {dof}"
    rate = sum(min(a, b) for a, b in zip(p_rows[0], q_row))
    sigma = math.sqrt(n * rate * (1 - rate))
    assert abs(accepted - n * rate) < 5 * sigma + 1


def test_sampling_rule_is_not_trivially_p():
    """Guard for the distribution test: a rule that just emits the draft token would fail it
    (the chi-square has power here)."""
    p0 = EXACT_CASES["overlapping"][0][0]
    q_row = EXACT_CASES["overlapping"][1]
    draws = torch.multinomial(torch.tensor(q_row, dtype=torch.float64), 8_000, replacement=True,
                              generator=gen(3)).tolist()
    stat, dof = chi_square([draws.count(t) for t in range(5)], p0)
    assert stat > CHI2_CRIT_001[dof]


# ---------------------------------------------------------------- warpers

LOGITS = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]], dtype=torch.float64))


def test_greedy_probs_are_plain_softmax():
    s = Sampling()
    assert s.greedy and len(s.warpers()) == 0
    assert torch.allclose(probs_from_logits(LOGITS, s), torch.softmax(LOGITS, -1))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature(temperature):
    got = probs_from_logits(LOGITS, Sampling(temperature=temperature))
    assert got.dtype == torch.float64
    assert torch.allclose(got, torch.softmax(LOGITS / temperature, -1), atol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_top_k(k):
    got = probs_from_logits(LOGITS, Sampling(temperature=1.0, top_k=k))
    assert ((got > 0).sum(-1) == k).all()
    for r in range(2):
        top = set(torch.topk(LOGITS[r], k).indices.tolist())
        assert set(torch.nonzero(got[r]).flatten().tolist()) == top
        expected = torch.softmax(LOGITS[r], -1)[list(sorted(top))]
        assert torch.allclose(got[r, sorted(top)], expected / expected.sum())


def test_top_p():
    got = probs_from_logits(LOGITS, Sampling(temperature=1.0, top_p=0.7))
    # smallest set with cumulative probability >= 0.7: {0.5, 0.3}, renormalized
    assert torch.allclose(got[0], torch.tensor([0.625, 0.375, 0.0, 0.0], dtype=torch.float64))
    assert torch.allclose(got[1], torch.tensor([0.0, 0.0, 0.375, 0.625], dtype=torch.float64))


def test_temperature_and_top_k_together():
    got = probs_from_logits(LOGITS, Sampling(temperature=0.7, top_k=2))
    for r in range(2):
        top = torch.topk(LOGITS[r], 2).indices
        expected = torch.zeros(4, dtype=torch.float64)
        expected[top] = torch.softmax(LOGITS[r, top] / 0.7, -1)
        assert torch.allclose(got[r], expected, atol=1e-12)


def test_verify_applies_warpers_to_the_target():
    """top_k=1 makes p one-hot on the target's argmax: a drafted non-argmax token is always
    rejected (even with q = p of the unwarped target) and the correction is the argmax."""
    logits = rows(2, 0, vocab=5)
    s = Sampling(temperature=1.0, top_k=1)
    q_unwarped = torch.softmax(logits[:1], -1)
    for seed in range(50):
        assert verify([4], logits, q_unwarped, s, gen(seed)) == Verdict(0, 2, False)
        one_hot = torch.zeros(1, 5, dtype=torch.float64)
        one_hot[0, 2] = 1.0
        assert verify([2], logits, one_hot, s, gen(seed)) == Verdict(1, 0, True)


def test_draft_side_uses_the_same_warpers():
    """The draft's q rows (what verify_sampling divides by) carry the same warpers as p."""
    s = Sampling(temperature=0.7, top_k=3)
    model = tiny.target(3)
    window = serial_rollout(Lane(model, "draft"), tiny.prompt(3, 6), 4, s, gen(0))
    assert window.q_rows.shape == (4, tiny.VOCAB)
    assert ((window.q_rows > 0).sum(-1) == 3).all()
    assert torch.allclose(window.q_rows.sum(-1), torch.ones(4, dtype=torch.float64))
    for i, t in enumerate(window.tokens):
        assert window.q_rows[i, t] > 0  # each token was drawn from its own row
    # and to_probs is probs_from_logits on CPU in float64
    logits = torch.randn(2, 9, generator=gen(5))
    assert torch.equal(to_probs(logits, s), probs_from_logits(logits, s))
