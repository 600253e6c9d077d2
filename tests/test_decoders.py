"""The three decoders on tiny float64 models: greedy output is transformers' own generate()
token for token, the event stream keeps its invariants, caches roll back, runs can be
cancelled, a failing draft lane degrades to plain decoding, bad input is one Error + Finish.

Everything is compared with `model.generate(do_sample=False)` (tests/tiny.py), never with
another of our decoders.
"""
import math

import pytest
import torch

from mirror_sd.engine.mirror import draft_lane as mirror_mod
from mirror_sd.engine.acceptance import probs_from_logits
from mirror_sd.engine.registry import METHODS
from mirror_sd.engine.settings import Settings
from mirror_sd.engine.events import (Commit, DraftBranch, EarlyExit, Error, Finish, Span,
                              StepStart, Verify)
from mirror_sd.engine.lanes import Lane
from mirror_sd.engine.mirror.decoder import MirrorSpeculative
from mirror_sd.models.pair import ModelPair
from mirror_sd.errors import MirrorSDError

import tiny
from tiny import one_torch_thread, wait_no_draft_lane  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DECODERS = METHODS  # the registry: name -> decoder class
SEEDS = [0, 1, 2, 3, 4]
N_NEW = 16
STATUSES = {"taken", "cancelled", "serial"}


def prompts_for(seed):
    """Two prompts per model seed, one of them a single token; lengths vary with the seed."""
    return [tiny.prompt(seed, 1), tiny.prompt(seed, 4 + 9 * seed)]


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


def check_events(events, settings: Settings, method: str, prompt_ids):
    """Invariants every finished run keeps; returns the Finish."""
    fin = tiny.finish(events)
    assert len(of(events, Finish)) == 1
    assert not of(events, Error), of(events, Error)
    commits = of(events, Commit)
    assert [t for c in commits for t in c.token_ids] == fin.token_ids
    assert all(len(c.token_ids) == len(c.sources) >= 1 for c in commits)
    assert len(fin.token_ids) <= settings.max_new_tokens
    st = fin.stats
    assert st["method"] == method and st["new_tokens"] == len(fin.token_ids)
    assert st["prompt_tokens"] == len(prompt_ids) and st["cancelled"] is False
    assert st["hit_rate"] is None or 0.0 <= st["hit_rate"] <= 1.0
    verifies = of(events, Verify)
    for v in verifies:
        assert 0 <= v.accepted <= len(v.drafted) == len(v.p_probs) == len(v.q_probs)
        assert v.kind == ("bonus" if v.accepted == len(v.drafted) else "correction")
    if method == "ar":
        assert not verifies and all(c.sources == ["plain"] for c in commits)
        assert st["target_forwards"] == len(fin.token_ids)
        return fin
    # each Commit of a speculative step is the accepted prefix plus the target's own token
    # (cut at max_new_tokens / eos)
    assert len(commits) == len(verifies)
    for v, c in zip(verifies, commits):
        full = v.drafted[:v.accepted] + [v.token]
        assert c.step == v.step and c.token_ids == full[:len(c.token_ids)]
        assert c.sources == (["accepted"] * v.accepted + [v.kind])[:len(c.token_ids)]
        assert all(len(v.drafted) == settings.gamma for v in verifies)
    assert st["drafted"] == sum(len(v.drafted) for v in verifies)
    assert st["accepted_drafts"] == sum(v.accepted for v in verifies)
    assert st["target_forwards"] == len(verifies)
    assert 0.0 <= st["acceptance_rate"] <= 1.0
    if method == "mirror":
        check_mirror_events(events, settings)
    return fin


def check_mirror_events(events, settings: Settings):
    exit_layer = settings.exit_layer or tiny.LAYERS // 2
    exits = of(events, EarlyExit)
    steps = [e.step for e in of(events, StepStart)]
    assert [e.step for e in exits] == steps  # one early exit per verified window
    for e in exits:
        assert e.layer == exit_layer
        assert e.positions == list(range(settings.gamma + 1))
        assert len(e.token_ids) == len(e.logprobs) == settings.gamma + 1
        for ids, lps in zip(e.token_ids, e.logprobs):
            assert len(ids) == len(set(ids)) == len(lps) == settings.kappa
            assert all(lp <= 1e-9 for lp in lps) and lps == sorted(lps, reverse=True)
    branches = of(events, DraftBranch)
    assert {b.status for b in branches} <= STATUSES
    for step in set(steps):
        assert sum(b.status == "taken" for b in branches if b.step == step) <= 1
    # the windows chain: each step verifies the one taken (hit) or serial (miss) rollout
    # emitted since the previous StepStart, exactly one of them
    candidates = []
    hits = misses = 0
    for e in events:
        if isinstance(e, DraftBranch) and e.status in ("taken", "serial"):
            candidates.append(e)
        elif isinstance(e, StepStart):
            assert len(candidates) == 1, f"step {e.step}: {len(candidates)} next windows"
            assert e.window == candidates[0].tokens and len(e.window) == settings.gamma
            if e.step > 0:
                hits += candidates[0].status == "taken"
                misses += candidates[0].status == "serial"
            candidates = []
    st = events[-1].stats
    assert (st["hits"], st["fallbacks"]) == (hits, misses)
    for b in branches:
        assert len(b.tokens) == len(b.q_probs) <= settings.gamma
        if b.status in ("taken", "serial"):
            assert len(b.tokens) == settings.gamma
    lanes = {s.lane for s in of(events, Span)}
    assert {"target", "draft"} <= lanes
    check_ranks(events, settings)


def check_ranks(events, settings: Settings):
    """Each step's verdict rank (the rank of its taken or serial branch, rooted at (A, c))
    decides the hit: taken exactly when 0 <= rank < budget. The roots rolled out are the best
    `budget` of the scored list, plus at most EARLY_ROOTS started on the draft's own guess
    before the exit and dropped (cancelled) when the exit ranked them lower."""
    budget = settings.branch_budget
    verifies = {v.step: v for v in of(events, Verify)}
    scored = [b for b in of(events, DraftBranch) if b.rank is not None]  # not the first window
    ranks = []
    for step in sorted({b.step for b in scored}):
        mine = [b for b in scored if b.step == step]
        (verdict,) = [b for b in mine if b.status in ("taken", "serial")]
        v = verifies[step]
        assert (verdict.depth, verdict.root_token) == (v.accepted, v.token)
        assert verdict.rank >= -1
        assert (verdict.status == "taken") == (0 <= verdict.rank < budget), (step, verdict)
        rolled = [b for b in mine if b.status != "serial"]
        assert len({b.rank for b in rolled}) == len(rolled) and all(b.rank >= 0 for b in rolled)
        # the score shown with a branch is the one that ranked it: a better rank, a score no lower
        by_rank = sorted(rolled, key=lambda b: b.rank)
        assert all(a.score >= b.score for a, b in zip(by_rank, by_rank[1:])), [(b.rank, b.score) for b in by_rank]
        best = {b.rank for b in rolled if b.rank < budget}
        # all of the best `budget` (fewer: a short list), unless the verdict was in before the
        # lane read the early exit: then only the verdict's own root starts (the rest are stale)
        # (and the early roots started before it, all cancelled)
        early = [b for b in rolled if b.rank != verdict.rank]
        late = len(early) <= mirror_mod.EARLY_ROOTS and all(b.status == "cancelled" for b in early)
        assert best == set(range(len(best))) or late
        assert len(best) == budget or verdict.rank < len(best) or late
        extra = [b for b in rolled if b.rank >= budget]
        assert len(extra) <= mirror_mod.EARLY_ROOTS and all(b.status == "cancelled" for b in extra)
        ranks.append(verdict.rank)
    st = events[-1].stats
    assert st["verdict_ranks"] == ranks
    assert st["hits"] == sum(0 <= r < budget for r in ranks)
    for sp in of(events, Span):  # never more rows than the budget in one draft forward
        if sp.label == "branches":
            assert 1 <= int(sp.detail.split()[0]) <= budget


def settings_for(method, seed, **over):
    """Greedy settings that vary with the seed (gamma, kappa, exit layer, branch budget)."""
    kw = dict(max_new_tokens=N_NEW, gamma=[1, 3, 5, 3, 4][seed], kappa=[1, 4, 8, 2, 3][seed],
              exit_layer=[1, 3, None, 2, 3][seed], branch_budget=[1, 3, 2, 3, 1][seed])
    kw.update(over)
    return Settings(**kw)


def run_and_check(method, pair, prompt_ids, settings, cancel=None):
    events = list(DECODERS[method](pair, settings).generate(prompt_ids, cancel))
    return events, check_events(events, settings, method, prompt_ids)


# ---------------------------------------------------------------- greedy == generate()

@pytest.mark.parametrize("seed", SEEDS)
def test_autoregressive_greedy_matches_generate(seed):
    pair = tiny.cached_pair("same", seed)
    for p in prompts_for(seed):
        _, fin = run_and_check("ar", pair, p, settings_for("ar", seed))
        assert fin.token_ids == tiny.cached_reference(seed, "qwen", tuple(p), N_NEW)
        assert len(fin.token_ids) == N_NEW


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("pair_kind", ["same", "random", "perturbed"])
@pytest.mark.parametrize("method", ["sd", "mirror"])
def test_speculative_greedy_matches_generate(method, pair_kind, seed):
    pair = tiny.cached_pair(pair_kind, seed)
    s = settings_for(method, seed)
    rates = []
    prompts = prompts_for(seed)
    if pair_kind == "random":  # one step per token: the slowest case, one prompt per seed
        prompts = [prompts[seed % 2]]
    for p in prompts:
        events, fin = run_and_check(method, pair, p, s)
        assert fin.token_ids == tiny.cached_reference(seed, "qwen", tuple(p), N_NEW)
        assert len(fin.token_ids) == N_NEW  # max_new_tokens, exactly
        rates.append(fin.stats["acceptance_rate"])
        if pair_kind == "same":  # the draft is the target: every drafted token is accepted
            assert all(v.accepted == s.gamma for v in of(events, Verify))
            steps = math.ceil(N_NEW / (s.gamma + 1))
            assert fin.stats["mean_accepted"] == pytest.approx(N_NEW / steps)
            assert fin.stats["mean_accepted"] >= (s.gamma + 1) * (1 - 1 / steps) - 1e-9
    if pair_kind == "random":  # an unrelated draft: (almost) nothing accepted
        assert max(rates) <= 0.25


@pytest.mark.parametrize("method", ["sd", "mirror"])
@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_gamma_sweep_perturbed(method, gamma):
    seed = 2
    pair = tiny.cached_pair("perturbed", seed)
    p = tiny.prompt(seed, 6)
    _, fin = run_and_check(method, pair, p, Settings(max_new_tokens=24, gamma=gamma))
    assert fin.token_ids == tiny.cached_reference(seed, "qwen", tuple(p), 24)


MIRROR_GRID = [  # gamma, kappa, exit_layer, branch_budget
    (1, 4, 1, 1), (3, 1, 3, 3), (5, 8, 1, 3), (3, 4, 3, 1), (5, 2, 2, 1), (1, 1, 3, 3), (3, 64, 1, 3),
]


@pytest.mark.parametrize("gamma,kappa,exit_layer,budget", MIRROR_GRID)
def test_mirror_settings_grid(gamma, kappa, exit_layer, budget):
    seed = 3
    pair = tiny.cached_pair("perturbed", seed)
    p = tiny.prompt(seed, 5)
    s = Settings(max_new_tokens=24, gamma=gamma, kappa=kappa, exit_layer=exit_layer,
                 branch_budget=budget)
    events, fin = run_and_check("mirror", pair, p, s)
    assert fin.token_ids == tiny.cached_reference(seed, "qwen", tuple(p), 24)
    assert of(events, EarlyExit) and all(e.layer == exit_layer for e in of(events, EarlyExit))
    for b in of(events, DraftBranch):  # the best `budget` roots per step, plus the early guess
        assert sum(x.step == b.step and x.status != "serial" and x.rank is not None
                   for x in of(events, DraftBranch)) <= budget + mirror_mod.EARLY_ROOTS


@pytest.mark.parametrize("method", ["ar", "sd", "mirror"])
@pytest.mark.parametrize("seed", [0, 1])
def test_llama_greedy_matches_generate(method, seed):
    pair = tiny.cached_pair("perturbed", seed, "llama")
    for p in prompts_for(seed):
        _, fin = run_and_check(method, pair, p, settings_for(method, seed))
        assert fin.token_ids == tiny.cached_reference(seed, "llama", tuple(p), N_NEW)


def test_mirror_draft_is_the_same_model_object():
    """draft and target are one nn.Module: the early-exit hook fires in the draft lane's
    forwards too and must ignore them; output and acceptance stay exact."""
    pair = tiny.pair_same(1, shared=True)
    assert pair.draft is pair.target
    p = tiny.prompt(1, 7)
    s = Settings(max_new_tokens=20, gamma=4, branch_budget=3)
    events, fin = run_and_check("mirror", pair, p, s)
    assert fin.token_ids == tiny.reference_greedy(pair.target, p, 20)
    assert fin.stats["acceptance_rate"] == 1.0
    assert all(len(e.token_ids) == s.gamma + 1 for e in of(events, EarlyExit))


def test_mirror_reuses_branches_when_the_draft_is_the_target():
    """A confident draft equal to the target: the bonus-depth branch is the one rolled out,
    reused as the next window (hits), and since the branch is the draft's own greedy
    continuation, every window is still accepted in full."""
    pair = tiny.pair_same(4, sharp=20.0)
    p = tiny.prompt(4, 6)
    s = Settings(max_new_tokens=40, gamma=3, branch_budget=2)
    events, fin = run_and_check("mirror", pair, p, s)
    assert fin.token_ids == tiny.reference_greedy(pair.target, p, 40)
    assert fin.stats["hits"] >= 3
    assert fin.stats["acceptance_rate"] == 1.0
    assert fin.stats["mean_accepted"] == pytest.approx(s.gamma + 1)


@pytest.mark.parametrize("method", ["ar", "sd", "mirror"])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_max_new_tokens_is_exact_even_inside_a_window(method, n):
    """gamma 5 windows commit up to 6 tokens at once: the run still stops at exactly n."""
    seed = 4
    pair = tiny.cached_pair("same", seed)  # everything accepted: windows overshoot n
    p = tiny.prompt(seed, 3)
    events, fin = run_and_check(method, pair, p, Settings(max_new_tokens=n, gamma=5))
    assert fin.token_ids == tiny.cached_reference(seed, "qwen", tuple(p), N_NEW)[:n]


# ---------------------------------------------------------------- exact internals of a Mirror trace

def draft_probs(model, ids, sampling):
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0]
    return probs_from_logits(logits, sampling)


@pytest.mark.parametrize("temperature,top_k", [(0.0, 0), (0.8, 5)])
def test_mirror_branches_and_early_exit_are_exact(temperature, top_k):
    """Recompute what the draft lane and the early exit reported from fresh full forwards:
    - every rollout (taken, cancelled, serial) drafted each token from the draft model's
      distribution at its true context y.., d_1..d_j, v, e_1..e_i (batched rows, masks and
      positions are right), greedy rollouts took the argmax;
    - the early exit is the top-kappa of log_softmax(lm_head(norm(h_le))) of the target over
      [y_n, d_1..d_gamma]."""
    seed = 1
    pair = tiny.cached_pair("perturbed", seed)
    p = tiny.prompt(seed, 8)
    s = Settings(max_new_tokens=30, gamma=3, kappa=5, exit_layer=2, branch_budget=3,
                 temperature=temperature, top_k=top_k, seed=7)
    events, fin = run_and_check("mirror", pair, p, s)
    sampling = s.sampling
    body = pair.target.get_decoder()
    starts = {e.step: e for e in of(events, StepStart)}
    checked = 0
    first = True
    for b in of(events, DraftBranch):
        if first:  # the initial window: drafted right after the prompt
            context, first = list(p), False
        else:
            st = starts[b.step]
            context = p + fin.token_ids[:st.committed] + st.window[:b.depth] + [b.root_token]
        probs = draft_probs(pair.draft, context + b.tokens, sampling)
        for i, (tok, q) in enumerate(zip(b.tokens, b.q_probs)):
            row = probs[len(context) - 1 + i]
            assert q == pytest.approx(float(row[tok]), abs=1e-9), (b, i)
            if sampling.greedy:
                assert tok == int(row.argmax())
            else:
                assert row[tok] > 0
            checked += 1
    assert checked > 20
    for e in of(events, EarlyExit):
        st = starts[e.step]
        ids = p + fin.token_ids[:st.committed] + st.window
        with torch.inference_mode():
            out = pair.target(torch.tensor([ids]), output_hidden_states=True)
            h = out.hidden_states[s.exit_layer][0, -(s.gamma + 1):]
            lp = torch.log_softmax(pair.target.get_output_embeddings()(body.norm(h)), -1)
        top = lp.topk(s.kappa, dim=-1)
        assert e.token_ids == top.indices.tolist()
        assert torch.allclose(torch.tensor(e.logprobs, dtype=torch.float64), top.values, atol=1e-5)


# ---------------------------------------------------------------- eos

@pytest.mark.parametrize("method", ["ar", "sd", "mirror"])
def test_eos_stops_at_the_same_place_as_generate(method):
    p = tiny.prompt(3, 5)
    model, eos, index = tiny.eos_target(3, p)
    pair = ModelPair(model, tiny.perturb(model, tiny.PERTURB_SCALE, 99))
    assert eos in pair.eos_token_ids
    ref = tiny.reference_greedy(model, p, 40)
    assert ref[-1] == eos and len(ref) == index + 1 < 40  # the reference stops early
    s = Settings(max_new_tokens=40, gamma=3)
    events, fin = run_and_check(method, pair, p, s)
    assert fin.token_ids == ref  # eos included, nothing after it
    assert of(events, Commit)[-1].token_ids[-1] == eos


# ---------------------------------------------------------------- KV rollback

@pytest.mark.parametrize("method", ["sd", "mirror"])
def test_long_run_with_many_rejections_matches_generate(method):
    """120 tokens with a perturbed draft: dozens of partial rejections, each cutting both
    caches back; any stale key/value left behind would change the target's argmax."""
    seed = 0
    pair = tiny.cached_pair("perturbed", seed)
    p = tiny.prompt(seed, 10)
    s = Settings(max_new_tokens=120, gamma=4, branch_budget=2)
    events, fin = run_and_check(method, pair, p, s)
    assert fin.token_ids == tiny.cached_reference(seed, "qwen", tuple(p), 120)
    rejections = [v for v in of(events, Verify) if v.kind == "correction"]
    assert len(rejections) >= 10 and any(0 < v.accepted < s.gamma for v in rejections)
    assert 0.2 < fin.stats["acceptance_rate"] < 0.95


def test_lane_sync_rolls_the_cache_back():
    model = tiny.cached_pair("same", 0).target
    lane = Lane(model, "target")
    a = tiny.prompt(5, 12)
    b = a[:7] + [(t + 1) % tiny.VOCAB for t in a[7:10]] + [3, 4, 5, 6]  # diverges at 7

    def fresh(ids):
        with torch.inference_mode():
            return model(torch.tensor([ids])).logits[0, -1]

    assert lane.sync(a) == a
    lane.feed(a)
    assert lane.ids == a
    pending = lane.sync(b)
    assert pending == b[7:] and lane.ids == a[:7]
    assert lane.cache.get_seq_length() == 7
    logits = lane.feed(pending)
    assert torch.allclose(logits[-1], fresh(b), atol=1e-10)
    # a prefix of what the cache holds: the last token is fed again for its logits
    pending = lane.sync(b[:5])
    assert pending == [b[4]] and lane.cache.get_seq_length() == 4
    assert torch.allclose(lane.feed(pending)[-1], fresh(b[:5]), atol=1e-10)
    # an extension: only the new tokens
    c = b[:5] + [9, 8]
    assert lane.sync(c) == [9, 8]
    assert torch.allclose(lane.feed([9, 8], logits_to_keep=1)[-1], fresh(c), atol=1e-10)
    # back to a completely different text
    d = [(t + 2) % tiny.VOCAB for t in a[:3]]
    assert lane.sync(d) == d and lane.cache.get_seq_length() == 0
    assert torch.allclose(lane.feed(d)[-1], fresh(d), atol=1e-10)


# ---------------------------------------------------------------- bad input

BAD = [  # (name, prompt length, settings overrides, words the message must contain)
    ("empty prompt", 0, {}, "empty"),
    ("max_new_tokens 0", 5, {"max_new_tokens": 0}, "max new tokens"),
    ("beyond the context", 10, {"max_new_tokens": 250}, "context"),
    ("prompt longer than the context", 300, {"max_new_tokens": 4}, "context"),
]
BAD_SPECULATIVE = [("gamma 0", 5, {"gamma": 0}, "gamma")]
BAD_MIRROR = [
    ("kappa 0", 5, {"kappa": 0}, "kappa"),
    ("exit layer 0", 5, {"exit_layer": 0}, "exit layer"),
    ("exit layer N", 5, {"exit_layer": tiny.LAYERS}, "exit layer"),
    ("exit layer > N", 5, {"exit_layer": tiny.LAYERS + 3}, "exit layer"),
]
BAD_CASES = ([("ar",) + c for c in BAD] + [("sd",) + c for c in BAD + BAD_SPECULATIVE]
             + [("mirror",) + c for c in BAD + BAD_SPECULATIVE + BAD_MIRROR])


@pytest.mark.parametrize("method,name,plen,over,words", BAD_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in BAD_CASES])
def test_bad_input_is_one_error_and_a_finish(method, name, plen, over, words):
    """Settings.validate's MirrorSDError must come out as one Error event followed by a Finish
    (decoder.py: "ends with exactly one Finish (or an Error then Finish)"), never raised."""
    pair = tiny.cached_pair("perturbed", 0)
    s = Settings(**{"max_new_tokens": 8, "gamma": 3, **over})
    prompt_ids = tiny.prompt(0, plen) if plen else []
    events = list(DECODERS[method](pair, s).generate(prompt_ids))  # never raises
    errors = of(events, Error)
    assert len(errors) == 1, events
    assert words in errors[0].message.lower(), errors[0].message
    assert isinstance(events[-1], Finish), f"no Finish after the Error: {[type(e).__name__ for e in events]}"
    assert len(of(events, Finish)) == 1 and events[-1].token_ids == []
    assert not of(events, Commit)
    assert wait_no_draft_lane() == []


def test_kappa_message_names_the_real_limit():
    """kappa is capped by the vocabulary too: with 12 token ids, kappa 20 is refused, and the
    message must say what is allowed for this pair (not '1 and 64', which 20 satisfies)."""
    pair = tiny.pair_perturbed(0, vocab_size=12)
    events = list(MirrorSpeculative(pair, Settings(max_new_tokens=4, kappa=20)).generate([1, 2, 3]))
    errors = of(events, Error)
    assert len(errors) == 1
    assert "12" in errors[0].message, errors[0].message


def test_every_registered_method_says_which_settings_it_reads():
    """The registry is the one list of methods: each has settings to check (its `uses`),
    a display label, and AR alone runs without the draft."""
    from mirror_sd.engine.registry import LABELS, NAMES, REGISTRY
    from mirror_sd.engine.settings import METHOD_USES
    assert list(METHOD_USES) == NAMES and LABELS == {"ar": "AR", "sd": "SD", "mirror": "Mirror-SD"}
    assert all(METHOD_USES[name] == m.uses for name, m in REGISTRY.items())
    assert [m.name for m in REGISTRY.values() if not m.drafts] == ["ar"]
    bad_gamma = Settings(gamma=0)
    bad_gamma.check("ar")  # AR never reads gamma
    for name in ("sd", "mirror"):
        with pytest.raises(MirrorSDError, match="gamma"):
            bad_gamma.check(name)
