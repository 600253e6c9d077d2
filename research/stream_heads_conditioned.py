"""Would stream heads that also see the drafted token do better?
(docs/performance.md, "Stream heads"). Offline, on the training cache that `python -m mirror_sd.training.streams --source
continuations --cache FILE` writes (the draft's own greedy continuations and final hidden states):

    python research/stream_heads_conditioned.py --cache out/streams-cont.pt

Fits, on the same positions, split (every 10th continuation held out) and seed:
  - residual heads, the shipped design (streams.StreamHeads): h_j = h + W2_j SiLU(W1_j h),
    every head from h alone;
  - token-conditioned heads (Hydra-like): h_j = h_{j-1} + W2_j SiLU(W1_j [h_{j-1}; g E(t_j)]),
    where t_j is the token the previous position proposed (the draft's own next token for
    j = 1), E the draft's input embeddings and g a learned gain. Trained teacher-forced on the
    draft's own tokens; scored as they would run: each head is fed the previous one's top-1.
Both: rank 64, the softmax of training restricted to the tokens the continuations contain,
AdamW (weight decay 0.1) with a one-cycle schedule. Prints, per stream position, how often head
j's top-1 (full vocabulary) equals the draft's own token j+1 steps ahead, and how often heads
1..j all do (and the draft's own next token too).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from mirror_sd.proposals.streams import StreamHeads  # noqa: E402
from mirror_sd.training.streams import stream_targets  # noqa: E402

K = 3  # heads


def positions(sequences):
    """(h [N, H], tokens [N, K+1]): column 0 the draft's own token at row t, column j the
    token j steps later (train_streams.stream_targets); -1 past the end of a continuation."""
    h, later = stream_targets(sequences, K)
    own = torch.cat([tokens for _, tokens in sequences])
    return h.float(), torch.cat([own[:, None], later], 1)


class Conditioned(nn.Module):
    def __init__(self, hidden, rank, embed, gain):
        super().__init__()
        self.embed = embed
        self.down = nn.Parameter(torch.randn(K, rank, 2 * hidden) / (2 * hidden) ** 0.5)
        self.up = nn.Parameter(torch.zeros(K, hidden, rank))
        self.gain = nn.Parameter(torch.full((1,), gain))

    def step(self, j, h, token):
        e = self.embed[token] * self.gain
        return h + F.silu(torch.cat([h, e], 1) @ self.down[j].T) @ self.up[j].T

    def forward(self, h, fed):
        """fed [N, K]: the tokens fed to heads 1..K (teacher forcing)."""
        out = []
        for j in range(K):
            h = self.step(j, h, fed[:, j].clamp(min=0))
            out.append(h)
        return torch.stack(out, 1)


def train(model, h, tokens, w_vocab, remap, epochs, lr=3e-3, batch=256):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    steps = epochs * ((len(h) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    g = torch.Generator().manual_seed(0)
    t0 = time.time()
    for epoch in range(epochs):
        order = torch.randperm(len(h), generator=g)
        total, n = 0.0, 0
        for i in range(0, len(h), batch):
            idx = order[i:i + batch]
            t = tokens[idx]
            out = model(h[idx], t[:, :K]) if isinstance(model, Conditioned) else model(h[idx])
            local = torch.where(t[:, 1:] >= 0, remap[t[:, 1:].clamp(min=0)], -1)
            loss = F.cross_entropy((out @ w_vocab.T).reshape(-1, len(w_vocab)), local.reshape(-1), ignore_index=-1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total, n = total + loss.item(), n + 1
        print(f"  epoch {epoch}: loss {total / n:.3f} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)


@torch.no_grad()
def evaluate(model, h, tokens, lm_weight):
    """{head j: (top-1 == the draft's token j steps after its next one, heads 1..j and the
    draft's own next token all right)} over all rows, full vocabulary."""
    own = (h @ lm_weight.T).argmax(-1)
    if isinstance(model, Conditioned):
        cur, fed, preds = h, own, []
        for j in range(K):
            cur = model.step(j, cur, fed)
            fed = (cur @ lm_weight.T).argmax(-1)
            preds.append(fed)
        preds = torch.stack(preds, 1)
    else:
        states = model(h)
        preds = torch.stack([(states[:, j] @ lm_weight.T).argmax(-1) for j in range(K)], 1)
    running = own == tokens[:, 0]
    out = {}
    for j in range(K):
        valid = tokens[:, j + 1] >= 0
        ok = preds[:, j] == tokens[:, j + 1]
        running = running & ok
        out[j + 1] = (float((ok & valid).sum() / valid.sum()), float((running & valid).sum() / valid.sum()))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True, help="train_streams' --cache file (continuations)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--rank", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    data = torch.load(args.cache, weights_only=True)
    train_seqs = [d for i, d in enumerate(data) if i % 10 != 0]
    held_seqs = [d for i, d in enumerate(data) if i % 10 == 0]
    from transformers import AutoModelForCausalLM

    from mirror_sd.models.loading import DEFAULT_DRAFT, default_cache_dir
    model = AutoModelForCausalLM.from_pretrained(default_cache_dir() / f"{DEFAULT_DRAFT.stem}-hf", dtype=torch.float32)
    lm_weight = model.get_output_embeddings().weight.detach().clone()
    embed = model.get_input_embeddings().weight.detach().clone()
    del model
    h_train, t_train = positions(train_seqs)
    h_held, t_held = positions(held_seqs)
    vocab = torch.unique(torch.cat([t_train[t_train >= 0], t_held[t_held >= 0]]))  # restricted softmax
    remap = torch.full((lm_weight.shape[0],), -1, dtype=torch.long)
    remap[vocab] = torch.arange(len(vocab))
    w_vocab = lm_weight[vocab]
    print(f"train {len(h_train)} positions, held out {len(h_held)}, softmax over {len(vocab)} tokens", file=sys.stderr)
    hidden = h_train.shape[1]
    gain = h_train.norm(dim=1).mean().item() / embed.norm(dim=1).mean().item()
    models = [("conditioned on the drafted token", Conditioned(hidden, args.rank, embed, gain)),
              ("residual, from h alone (shipped design)", StreamHeads(hidden, K, args.rank))]
    results = {}
    for name, m in models:
        print(name, file=sys.stderr)
        train(m, h_train, t_train, w_vocab, remap, args.epochs)
        results[name] = evaluate(m, h_held, t_held, lm_weight)
    print(f"held out: {len(h_held)} positions; rank {args.rank}, {args.epochs} epochs")
    print("| heads | " + " | ".join(f"head {j} (chain)" for j in range(1, K + 1)) + " |")
    print("|---|" + "---|" * K)
    for name, r in results.items():
        print(f"| {name} | " + " | ".join(f"{r[j][0]:.1%} ({r[j][1]:.1%})" for j in range(1, K + 1)) + " |")


if __name__ == "__main__":
    main()
