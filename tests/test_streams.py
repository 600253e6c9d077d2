"""Stream heads (streams.py, train_streams.py) on tiny float64 models: shapes, a loss that
decreases on a toy corpus, a file round trip, and losslessness with streams on (greedy output
equals transformers' generate(); sampled tokens follow the target's distribution)."""
import pytest
import torch

from mirror_sd.engine.settings import Settings
from mirror_sd.engine.events import Notice, Span, Verify
from mirror_sd.engine.mirror.decoder import MirrorSpeculative
from mirror_sd.engine.speculative import Speculative
from mirror_sd.engine.proposers import rollout_for
from mirror_sd.proposals.streams import StreamHeads, find_heads
from mirror_sd.training.streams import continuations, fit, report, stream_targets

import tiny
from tiny import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DECODERS = {"sd": Speculative, "mirror": MirrorSpeculative}


def random_heads(model, n_heads=3, rank=8, seed=0, scale=1.0):
    """Untrained heads with a non-zero residual: proposals differ from the LM head's."""
    torch.manual_seed(seed)
    heads = StreamHeads(model.config.hidden_size, n_heads, rank).double()
    with torch.no_grad():
        heads.up.normal_(0, scale / rank ** 0.5)
    return heads


def with_heads(pair, heads):
    pair.streams = heads
    return pair


# ---------------------------------------------------------------- the heads

def test_head_shapes():
    heads = StreamHeads(32, 3, 8)
    h = torch.randn(5, 32)
    assert heads(h).shape == (5, 3, 32)
    lm_head = torch.nn.Linear(32, 97, bias=False)
    assert heads.rows(h[0], lm_head).shape == (4, 97)
    assert heads.rows(h[0], lm_head, 2).shape == (2, 97)
    # zero-initialized up-projections: every head starts as the LM head itself
    assert torch.allclose(heads.rows(h[0], lm_head)[1], lm_head(h[0]), atol=1e-6)


def toy_sequences(model, n_prompts=24, new_tokens=20, seed=0):
    prompts = [tiny.prompt(seed + i, 3 + i % 5) for i in range(n_prompts)]
    return continuations(model, prompts, new_tokens, pad_id=0, eos_ids=set())


def test_loss_decreases_and_heads_learn_the_drafts_continuations():
    model = tiny.target(0)
    seqs = toy_sequences(model)
    h, targets = stream_targets(seqs, 2)
    assert h.shape == (24 * 20, 32) and targets.shape == (24 * 20, 2)
    assert h.dtype == torch.float32
    # row t of a sequence scores its token t: the LM head's argmax there is that token
    first_h, first_tokens = seqs[0]
    lm = model.get_output_embeddings()
    assert torch.equal(lm(first_h.double()).argmax(-1), first_tokens)
    assert targets[0, 0] == first_tokens[1] and targets[19, 0] == -1
    torch.manual_seed(0)
    heads = StreamHeads(32, 2, 16)
    lm32 = torch.nn.Linear(32, tiny.VOCAB, bias=False)
    lm32.weight.data = lm.weight.detach().float()
    before = report(heads, lm32, h, targets)
    losses = fit(heads, lm32.weight, h, targets, epochs=30, batch=64, lr=1e-2, progress=False)
    assert losses[-1] < 0.7 * losses[0], losses
    after = report(heads, lm32, h, targets)
    for j in ("head1", "head2"):
        assert after[j]["match"] > before[j]["match"] + 0.1, (before, after)


def test_save_load_round_trip(tmp_path):
    heads = random_heads(tiny.target(0)).float()
    heads.meta = {"draft": "tiny", "vocab": tiny.VOCAB, "held_out": {"head1": {"match": 0.5}}}
    path = tmp_path / "heads.pt"
    heads.save(path)
    back = StreamHeads.load(path)
    assert (back.hidden, back.n_heads, back.rank) == (32, 3, 8)
    assert back.meta == heads.meta
    h = torch.randn(4, 32)
    assert torch.allclose(back(h), heads(h), atol=1e-2)  # stored in fp16
    assert torch.equal(back.up, heads.up.half().float())


def test_no_trained_file_falls_back_with_a_notice():
    seed = 1
    pair = tiny.pair_perturbed(seed)
    assert find_heads(pair)[0] is None
    p = tiny.prompt(seed, 6)
    events = tiny.run(Speculative, pair, p, max_new_tokens=12, gamma=3, streams="auto")
    notices = [e for e in events if isinstance(e, Notice)]
    assert len(notices) == 1 and "plain drafting" in notices[0].message
    assert tiny.finish(events).token_ids == tiny.reference_greedy(pair.target, p, 12)
    assert rollout_for(pair, "off")[1] is None


def test_one_draft_forward_per_rollout_when_gamma_is_k_plus_1():
    seed = 2
    pair = with_heads(tiny.pair_perturbed(seed), random_heads(tiny.target(seed), 3))
    calls = []
    hook = pair.draft.model.register_forward_hook(lambda m, a, o: calls.append(1))
    try:
        events = tiny.run(Speculative, pair, tiny.prompt(seed, 6), max_new_tokens=20, gamma=4,
                          streams="auto")
    finally:
        hook.remove()
    verifies = [e for e in events if isinstance(e, Verify)]
    assert len(calls) == len(verifies)  # each rollout of 4 tokens is one draft forward
    assert all(len(v.drafted) == 4 for v in verifies)
    assert any("streams" in e.detail for e in events if isinstance(e, Span) and e.lane == "draft")


def test_live_heads_are_made_once_per_draft_and_heads_and_leave_the_pair_alone():
    seed = 3
    pair = with_heads(tiny.pair_perturbed(seed), random_heads(tiny.target(seed), 2))
    before = set(vars(pair))
    live, _ = find_heads(pair)
    assert set(vars(pair)) == before  # no hidden attributes on the shared pair
    assert find_heads(pair)[0] is live
    pair.streams = random_heads(tiny.target(seed), 2, seed=1)  # new heads: a new live copy
    fresh, _ = find_heads(pair)
    assert fresh is not live and torch.equal(fresh.up, pair.streams.up)
    pair.draft = tiny.perturb(pair.target, 0.05, seed + 1)  # another draft: another copy
    assert find_heads(pair)[0] is not fresh


# ---------------------------------------------------------------- greedy losslessness

@pytest.mark.parametrize("method", ["sd", "mirror"])
@pytest.mark.parametrize("seed,gamma,n_heads", [(0, 4, 3), (1, 3, 2), (2, 5, 2), (3, 1, 3)])
def test_greedy_with_streams_equals_generate(method, seed, gamma, n_heads):
    pair = with_heads(tiny.pair_perturbed(seed), random_heads(tiny.target(seed), n_heads, seed=seed))
    for p in (tiny.prompt(seed, 1), tiny.prompt(seed, 5 + 3 * seed)):
        events = tiny.run(DECODERS[method], pair, p, max_new_tokens=24, gamma=gamma, streams="auto")
        assert not [e for e in events if isinstance(e, Notice)]
        fin = tiny.finish(events)
        assert fin.token_ids == tiny.reference_greedy(pair.target, p, 24)
        assert fin.stats["drafted"] > 0


def test_greedy_with_streams_accepts_more_than_nothing_when_heads_are_exact():
    """draft == target and heads with a zero residual propose 'the same token again': a
    sanity check that head tokens reach the verifier and are accepted when right."""
    seed = 4
    pair = with_heads(tiny.pair_same(seed), random_heads(tiny.target(seed), 2, scale=0.0))
    p = tiny.prompt(seed, 6)
    fin = tiny.finish(tiny.run(Speculative, pair, p, max_new_tokens=30, gamma=3, streams="auto"))
    assert fin.token_ids == tiny.reference_greedy(pair.target, p, 30)
    assert fin.stats["accepted_drafts"] >= fin.stats["steps"]  # position 0 is the draft's own


# ---------------------------------------------------------------- sampling losslessness

V = 12
SEED = 6
PROMPT = tiny.prompt(SEED, 4, vocab=V)


@pytest.fixture(scope="module")
def sampling_pair():
    pair = tiny.pair_perturbed(SEED, scale=0.2, vocab_size=V, initializer_range=0.3)
    return with_heads(pair, random_heads(pair.draft, 2, rank=4, seed=1, scale=2.0))


@pytest.mark.parametrize("method,temperature,gamma,runs", [
    ("sd", 1.0, 3, 400), ("mirror", 0.8, 2, 300)])
def test_sampled_tokens_follow_the_target_with_streams(sampling_pair, method, temperature, gamma, runs):
    tiny.assert_first_two_follow_the_target(DECODERS[method], sampling_pair, PROMPT, V, runs,
                                            temperature, gamma=gamma, branch_budget=2, kappa=4,
                                            streams="auto")


def test_head_proposals_differ_from_the_draft_here(sampling_pair):
    """Guard for the test above: the heads' q rows are not the draft's own next-token rows, so a
    rule that used the wrong q (or emitted head tokens unverified) would be caught."""
    from mirror_sd.engine.acceptance import Sampling
    from mirror_sd.engine.lanes import Lane
    heads, _ = find_heads(sampling_pair)
    rollout, _ = rollout_for(sampling_pair, "auto")
    lane = Lane(sampling_pair.draft, "draft")
    w = rollout(lane, PROMPT, 3, Sampling(1.0), torch.Generator().manual_seed(0))
    assert w.q_rows.shape == (3, V)
    assert torch.allclose(w.q_rows.sum(-1), torch.ones(3, dtype=torch.float64))
    with torch.inference_mode():
        own_next = torch.softmax(sampling_pair.draft(torch.tensor([PROMPT + w.tokens[:1]])).logits[0, -1].double(), -1)
    assert (w.q_rows[1] - own_next).abs().sum() > 0.2


# ---------------------------------------------------------------- the benchmark's methods

def test_bench_runs_stream_methods_next_to_the_plain_ones():
    from mirror_sd.bench import harness as bench
    from mirror_sd.models.pair import ModelPair
    from mirror_sd.questions import load_questions
    config = tiny.qwen_config(vocab_size=260, eos_token_id=258, max_position_embeddings=1024)
    target = tiny.build(config, 0)
    draft = tiny.perturb(target, 0.03, 1)
    pair = ModelPair(target, draft, tiny.tiny_tokenizer(), target_name="t", draft_name="d")
    pair.streams = random_heads(target, 2)
    questions = load_questions(None)[:1]
    res = bench.run_benchmark(pair, questions, ["sd", "sd-streams", "mirror-streams"],
                              Settings(max_new_tokens=8, gamma=3), warmup=False, progress=False)
    methods = res["questions"][0]["methods"]
    assert set(methods) == {"ar", "sd", "sd-streams", "mirror-streams"}
    for m in ("sd", "sd-streams", "mirror-streams"):
        assert methods[m]["identical_to_ar"] is True, (m, methods[m])
