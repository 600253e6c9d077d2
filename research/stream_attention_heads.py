"""Would the paper's stream design do better than the shipped residual heads?
(docs/performance.md, "Stream heads"). Offline, on the training cache that `python -m
mirror_sd.training.streams --source continuations --cache FILE` writes:

    python research/stream_attention_heads.py --cache out/streams-cont.pt

Speculative Streaming (Bhendawade et al. 2024, arXiv 2402.11131) runs K extra "stream" rows
per position through the draft's top N_s layers: row (t, j) enters layer L-N_s as the main
stream's hidden state at t plus a learned stream-identifier embedding, attends to the main
stream's keys and values up to t (and to streams 1..j at t), goes through the same layers and
the shared LM head, and is trained to predict the token j steps after the main stream's next
one. Here the draft's base weights stay frozen; the stream rows (only they) get a learned
embedding per top layer and LoRA adapters on every linear of the top layers, so the draft's
own next-token output is untouched (the lossless engine would keep its acceptance rule).

Steps:
1. The prompts of the cache are rebuilt (train_streams.build_prompts, same seed and count:
   the cache keeps only the continuations); one int8-dyn draft forward over prompt +
   continuation gives the hidden states entering the top N_s layers (printed: how often the
   forward's argmax equals the cached token; 83% measured, the whole-sequence int8-dyn
   forward is not the token-by-token one that generated them). Kept in --pre so a refit needs
   no draft forwards.
2. Targets: the draft's own choices along that text (the main stream through the last layer
   in fp32, then the LM head), so stream j at row t learns own[t+j].
3. Fit: the stream rows through the frozen top layers (fp32) with the adapters, cross-entropy
   over the tokens the targets contain, AdamW, one-cycle, seed 0, every 10th continuation held
   out (the split of research/stream_heads_conditioned.py).
4. Held out, full vocabulary: how often stream j's top-1 equals the draft's own token j+1
   steps ahead, and how often streams 1..j all do (the table in the docs has the same for the
   residual and conditioned heads, against the generated tokens).
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from mirror_sd.training.streams import later_tokens, load_draft  # noqa: E402

K = 3  # streams beyond the main one


@torch.inference_mode()
def precompute(model, tokenizer, data, n_top, limit=None, seed=0):
    """Per continuation: (h_in [T, n_top, H] fp16: the hidden states entering each top layer at
    every position of prompt + continuation[:-1], first row of the continuation's targets P-1,
    tokens [M]); and the share of rows whose forward argmax equals the cached token."""
    import copy

    from tqdm import tqdm

    from mirror_sd.models.loading import apply_precision
    from mirror_sd.training.streams import build_prompts
    prompts = build_prompts(tokenizer, len(data), seed)
    fast = apply_precision(copy.deepcopy(model), "int8-dyn", "draft")
    n = model.config.num_hidden_layers
    out, same, total = [], 0, 0
    for prompt, (_, tokens) in tqdm(list(zip(prompts, data))[:limit], desc="draft forwards", file=sys.stderr):
        ids = torch.tensor([prompt + tokens[:-1].tolist()])
        res = fast(input_ids=ids, output_hidden_states=True, use_cache=False)
        first = len(prompt) - 1
        same += int((res.logits[0, first:].argmax(-1) == tokens).sum())
        total += len(tokens)
        h_in = torch.stack([res.hidden_states[n - n_top + i][0] for i in range(n_top)], 1)
        out.append((h_in.half(), first, tokens.clone()))
    return out, same / total


class Lora(nn.Module):
    def __init__(self, linear: nn.Linear, rank: int):
        super().__init__()
        self.base = linear
        self.a = nn.Parameter(torch.randn(rank, linear.in_features) / math.sqrt(linear.in_features))
        self.b = nn.Parameter(torch.zeros(linear.out_features, rank))

    def forward(self, x, adapt: bool):
        y = self.base(x)
        return y + (x @ self.a.T) @ self.b.T if adapt else y


class StreamLayers(nn.Module):
    """The draft's top layers, run for the main stream (frozen, plain) and the stream rows
    (embedding + adapters)."""

    def __init__(self, model, n_top, rank):
        super().__init__()
        body = model.model
        self.layers = body.layers[-n_top:]
        self.norm = body.norm
        self.rotary = body.rotary_emb
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.dim = cfg.hidden_size // self.heads
        names = ["q_proj", "k_proj", "v_proj", "o_proj"], ["gate_proj", "up_proj", "down_proj"]
        self.adapters = nn.ModuleList()
        for layer in self.layers:
            ad = nn.ModuleDict()
            for n in names[0]:
                ad[n] = Lora(getattr(layer.self_attn, n), rank)
            for n in names[1]:
                ad[n] = Lora(getattr(layer.mlp, n), rank)
            self.adapters.append(ad)
        self.embed = nn.Parameter(torch.zeros(n_top, K, cfg.hidden_size))
        for p in model.parameters():
            p.requires_grad_(False)

    def _rope(self, x, pos):
        from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb
        cos, sin = self.rotary(x, pos[None])
        return apply_rotary_pos_emb(x, x, cos, sin)[0]

    @torch.no_grad()
    def own_tokens(self, h_in, first, lm_weight):
        """[M]: the draft's own argmax after rows first.. (the main stream through the last
        layer, fp32 like the stream rows): what stream j at row t is trained to predict is
        own[t+j], the draft's own choice along the fed text."""
        T, n_top, H = h_in.shape
        layer = self.layers[-1]
        att = layer.self_attn
        main = h_in[:, -1]
        m = layer.input_layernorm(main)
        pos = torch.arange(T)
        q = self._rope(att.q_proj(m).view(T, self.heads, self.dim).transpose(0, 1)[None], pos)[0]
        k = self._rope(att.k_proj(m).view(T, self.kv_heads, self.dim).transpose(0, 1)[None], pos)[0]
        v = att.v_proj(m).view(T, self.kv_heads, self.dim).transpose(0, 1)
        rep = self.heads // self.kv_heads
        a = F.scaled_dot_product_attention(q[None], k.repeat_interleave(rep, 0)[None],
                                           v.repeat_interleave(rep, 0)[None], is_causal=True)[0]
        x = main + att.o_proj(a.transpose(0, 1).reshape(T, H))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
        return (self.norm(x[first:]) @ lm_weight.T).argmax(-1)

    def forward(self, h_in, first):
        """h_in [T, n_top, H] (fp32); rows t >= first get K streams. -> [M, K, H] normed."""
        T, _, H = h_in.shape
        M = T - first
        pos_main = torch.arange(T)
        pos_s = (first + torch.arange(M)).repeat_interleave(K)  # stream row (t, j): t-major
        s_id = torch.arange(K).repeat(M)
        # mask [M*K, T + M*K]: main keys at <= t, stream keys of the same t and j' <= j
        t_row = torch.arange(M).repeat_interleave(K)
        mask = torch.cat([pos_main[None, :] <= pos_s[:, None],
                          (t_row[:, None] == t_row[None, :]) & (s_id[None, :] <= s_id[:, None])], 1)
        x = None
        rep = self.heads // self.kv_heads
        for i, (layer, ad) in enumerate(zip(self.layers, self.adapters)):
            main = h_in[:, i]  # the main stream entering this layer (frozen: precomputed)
            x = (main[first:].repeat_interleave(K, 0) if x is None else x) + self.embed[i][s_id]
            att = layer.self_attn
            with torch.no_grad():
                m = layer.input_layernorm(main)
                km = att.k_proj(m).view(T, self.kv_heads, self.dim).transpose(0, 1)
                vm = att.v_proj(m).view(T, self.kv_heads, self.dim).transpose(0, 1)
                km = self._rope(km[None], pos_main)[0]
            s = layer.input_layernorm(x)
            q = ad["q_proj"](s, True).view(-1, self.heads, self.dim).transpose(0, 1)
            k = ad["k_proj"](s, True).view(-1, self.kv_heads, self.dim).transpose(0, 1)
            v = ad["v_proj"](s, True).view(-1, self.kv_heads, self.dim).transpose(0, 1)
            q = self._rope(q[None], pos_s)[0]
            k = self._rope(k[None], pos_s)[0]
            keys = torch.cat([km, k], 1).repeat_interleave(rep, 0)
            vals = torch.cat([vm, v], 1).repeat_interleave(rep, 0)
            a = F.scaled_dot_product_attention(q[None], keys[None], vals[None], attn_mask=mask)[0]
            x = x + ad["o_proj"](a.transpose(0, 1).reshape(-1, H), True)
            s = layer.post_attention_layernorm(x)
            mlp = layer.mlp
            x = x + ad["down_proj"](mlp.act_fn(ad["gate_proj"](s, True)) * ad["up_proj"](s, True), True)
        return self.norm(x).view(M, K, H)


def fit(streams, train, w_vocab, remap, epochs, lr, max_minutes, batch_seqs=2):
    params = [p for p in streams.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    steps = epochs * ((len(train) + batch_seqs - 1) // batch_seqs)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    g = torch.Generator().manual_seed(0)
    t0 = time.time()
    for epoch in range(epochs):
        order = torch.randperm(len(train), generator=g).tolist()
        total, n = 0.0, 0
        for i in range(0, len(order), batch_seqs):
            opt.zero_grad()
            loss_sum = 0.0
            for k in order[i:i + batch_seqs]:
                h_in, first, tokens = train[k]
                out = streams(h_in.float(), first)  # [M, K, H]
                tgt = later_tokens(tokens, K)
                local = torch.where(tgt >= 0, remap[tgt.clamp(min=0)], -1)
                loss = F.cross_entropy((out @ w_vocab.T).reshape(-1, len(w_vocab)), local.reshape(-1),
                                       ignore_index=-1) / batch_seqs
                loss.backward()
                loss_sum += loss.item()
            opt.step()
            sched.step()
            total, n = total + loss_sum, n + 1
            if n % 50 == 0:
                print(f"  epoch {epoch} step {n}: loss {total / n:.3f} ({time.time() - t0:.0f} s)",
                      file=sys.stderr, flush=True)
            if max_minutes and time.time() - t0 > 60 * max_minutes:
                print(f"  stopped at the time limit in epoch {epoch}", file=sys.stderr)
                return time.time() - t0
        print(f"  epoch {epoch}: loss {total / n:.3f} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    return time.time() - t0


@torch.no_grad()
def evaluate(streams, held, lm_weight):
    """{j: (stream j top-1 == the draft's own token j+1 ahead, streams 1..j all right)}"""
    ok = {j: [0, 0, 0] for j in range(1, K + 1)}  # right, chain right, positions
    for h_in, first, tokens in held:
        out = streams(h_in.float(), first)
        preds = (out @ lm_weight.T).argmax(-1)  # [M, K]
        tgt = later_tokens(tokens, K)
        running = torch.ones(len(tokens), dtype=torch.bool)
        for j in range(1, K + 1):
            valid = tgt[:, j - 1] >= 0
            right = preds[:, j - 1] == tgt[:, j - 1]
            running = running & right
            ok[j][0] += int((right & valid).sum())
            ok[j][1] += int((running & valid).sum())
            ok[j][2] += int(valid.sum())
    return {j: (a / c, b / c) for j, (a, b, c) in ok.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True, help="train_streams' --cache file (continuations)")
    ap.add_argument("--pre", default="out/streams-attn-pre.pt", help="step 1's output (made if missing)")
    ap.add_argument("--top", type=int, default=2, help="N_s: top layers the streams run through")
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank of the stream rows' adapters")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--max-minutes", type=float, default=30.0, help="fitting stops here")
    ap.add_argument("--limit", type=int, default=None, help="first N continuations only (a smoke run)")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    data = torch.load(args.cache, weights_only=True)
    model, tokenizer, _, _ = load_draft("default")
    t0 = time.time()
    if os.path.exists(args.pre) and not args.limit:
        pre = torch.load(args.pre, weights_only=True)
    else:
        pre, agree = precompute(model, tokenizer, data, args.top, args.limit)
        print(f"step 1: {time.time() - t0:.0f} s; the forward's argmax equals the cached token on "
              f"{agree:.1%} of rows (prompts rebuilt correctly if near 100%)", file=sys.stderr)
        if not args.limit:
            torch.save(pre, args.pre)
    assert pre[0][0].shape[1] == args.top, "--pre was made for another --top"
    lm_weight = model.get_output_embeddings().weight.detach()
    streams = StreamLayers(model, args.top, args.rank)
    t1 = time.time()
    own = [streams.own_tokens(h.float(), f, lm_weight) for h, f, _ in pre]
    agree = sum(int((o == t).sum()) for o, (_, _, t) in zip(own, pre)) / sum(len(t) for _, _, t in pre)
    print(f"the draft's own tokens along the fed text: {time.time() - t1:.0f} s; equal to the cached "
          f"(generated) token on {agree:.1%} of rows", file=sys.stderr)
    pre = [(h, f, o) for (h, f, _), o in zip(pre, own)]
    train = [d for i, d in enumerate(pre) if i % 10 != 0]
    held = [d for i, d in enumerate(pre) if i % 10 == 0]
    vocab = torch.unique(torch.cat([t for _, _, t in pre]))  # the training softmax's tokens
    remap = torch.full((lm_weight.shape[0],), -1, dtype=torch.long)
    remap[vocab] = torch.arange(len(vocab))
    w_vocab = lm_weight[vocab]
    n_params = sum(p.numel() for p in streams.parameters() if p.requires_grad)
    print(f"train {len(train)} continuations ({sum(len(t) for _, _, t in train)} positions), held out "
          f"{len(held)}; softmax over {len(vocab)} tokens; {n_params} trained parameters", file=sys.stderr)
    before = evaluate(streams, held, lm_weight)
    seconds = fit(streams, train, w_vocab, remap, args.epochs, args.lr, args.max_minutes)
    after = evaluate(streams, held, lm_weight)
    n_held = sum(len(t) for _, _, t in held)
    print(f"held out: {n_held} positions; top {args.top} layers, LoRA rank {args.rank}, "
          f"{args.epochs} epochs, lr {args.lr}, fit {seconds:.0f} s")
    print("| streams | " + " | ".join(f"stream {j} (chain)" for j in range(1, K + 1)) + " |")
    print("|---|" + "---|" * K)
    for name, r in (("untrained (embeddings and adapters at zero)", before), ("trained", after)):
        print(f"| {name} | " + " | ".join(f"{r[j][0]:.1%} ({r[j][1]:.1%})" for j in range(1, K + 1)) + " |")


if __name__ == "__main__":
    main()
