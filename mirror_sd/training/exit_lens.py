"""Train the exit lens of a target (see exit_lens.py) on text that exists offline.

    python -m mirror_sd.training.exit_lens --target default --layers 14,18,21,24 \
        --out assets/exit_lens_qwen2.5-coder-1.5b.safetensors [--tokens N] [--seed S]

1) corpus: Python standard-library source files (code) and pydoc_data's topic texts (prose),
   each as raw text or inside the target's chat template (a user request, the text as the
   assistant's answer); whole documents go to the held-out split (every 10th, seeded).
2) collect: one target forward per 160-token chunk gives the hidden state after each exit
   layer, the final layer's output (before the final norm) and the final distribution's
   top-64 log-probabilities. Position 0 of a chunk (the attention sink) and
   the chat template's fixed prefix are skipped.
3) fit, per layer: a ridge-regression start (the map that sends the exit state towards the
   final state, truncated to rank r), then Adam on KL(final || lens) over the top-64 tokens,
   with the softmax taken over the batch's final top-64 tokens (the full 151,936-token head
   is too slow to train through on a CPU).
4) report on the held-out split, with the full head: how often the final (greedy) token is
   in the exit's top-1 / top-8, raw and with the lens. Saved in the file's metadata.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from mirror_sd.models.pair import exit_parts
from mirror_sd.errors import MirrorSDError
from mirror_sd.placement import set_process_threads
from mirror_sd.proposals.exit_lens import ExitLens, target_meta

TOP_K = 64  # final-distribution entries kept per position
SEQ_LEN = 160
HELD_OUT_EVERY = 10


# 1) corpus ---------------------------------------------------------------------------------

def offline_documents(seed: int) -> list[tuple[str, str, str]]:
    """(kind, title, text) from the Python install: stdlib code and pydoc topic prose."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
    files = sorted(p for p in lib.rglob("*.py") if not skip & set(p.relative_to(lib).parts))
    docs = []
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if len(text) > 2000:
            docs.append(("code", str(p.relative_to(lib)), text))
    try:
        from pydoc_data.topics import topics
        docs += [("prose", k, v) for k, v in sorted(topics.items()) if len(v) > 1000]
    except ImportError:
        pass
    rng = random.Random(seed)
    rng.shuffle(docs)
    return docs


def chat_text(tokenizer, kind: str, title: str, text: str) -> tuple[str, str]:
    """(prompt, answer): the document as an assistant answer in the target's chat template."""
    if kind == "code":
        ask, answer = f"Write the Python module {title}.", f"```python\n{text}"
    else:
        ask, answer = f"Explain '{title}' in Python.", text
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": ask}],
                                           add_generation_prompt=True, tokenize=False)
    return prompt, answer


def sequences(tokenizer, seed: int, tokens: int, seq_len: int = SEQ_LEN):
    """Yield (held_out, ids, start) chunks until `tokens` positions are gathered (10% held
    out); positions before `start` (a chat template's fixed prefix) are not collected."""
    rng = random.Random(seed + 1)
    total = 0
    for i, (kind, title, text) in enumerate(offline_documents(seed)):
        held_out = i % HELD_OUT_EVERY == 0
        offset = rng.randrange(max(1, len(text) - 6 * seq_len)) if len(text) > 8 * seq_len else 0
        text = text[offset:offset + 8 * seq_len]  # one window of the document is enough
        prompt_ids = []
        if getattr(tokenizer, "chat_template", None) and rng.random() < 0.5:
            prompt, text = chat_text(tokenizer, kind, title, text)
            prompt_ids = tokenizer(prompt)["input_ids"]
        ids = (prompt_ids + tokenizer(text)["input_ids"])[:seq_len]
        start = max(1, len(prompt_ids) - 1)  # from the prompt's last token: it predicts the answer
        if len(ids) - start < 32:
            continue
        yield held_out, ids, start
        total += len(ids) - start
        if total >= tokens:
            return


# 2) collect --------------------------------------------------------------------------------

@dataclass
class Collected:
    """Per split: hidden states by layer [n, H] (fp16), final pre-norm state [n, H] (fp16),
    final top-k ids [n, k] and log-probs [n, k], the final argmax [n]."""
    layers: list[int]
    hidden: dict  # layer -> tensor
    final_hidden: torch.Tensor
    top_ids: torch.Tensor
    top_logp: torch.Tensor

    @property
    def n(self) -> int:
        return self.top_ids.shape[0]

    @staticmethod
    def cat(parts: list[dict], layers) -> "Collected":
        return Collected(list(layers), {L: torch.cat([p["h"][L] for p in parts]) for L in layers},
                         torch.cat([p["final"] for p in parts]),
                         torch.cat([p["ids"] for p in parts]), torch.cat([p["logp"] for p in parts]))

    def to_dict(self) -> dict:
        return {"layers": self.layers, "hidden": self.hidden, "final_hidden": self.final_hidden,
                "top_ids": self.top_ids, "top_logp": self.top_logp}


@torch.inference_mode()
def collect_one(model, ids: list[int], layers, top_k: int = TOP_K, start: int = 1) -> dict:
    """One forward: exit states, final state and final top-k at positions start.. of the chunk."""
    _, norm, _ = exit_parts(model)
    grabbed = {}
    hook = norm.register_forward_pre_hook(lambda m, args: grabbed.__setitem__("final", args[0]))
    try:
        device = model.get_input_embeddings().weight.device
        out = model(torch.tensor([ids], device=device), output_hidden_states=True, use_cache=False)
    finally:
        hook.remove()
    logp = torch.log_softmax(out.logits[0, start:].float(), dim=-1)  # [S-start, V]
    top = logp.topk(min(top_k, logp.shape[-1]), dim=-1)
    store = lambda t: t[0, start:].to("cpu", torch.float16)  # noqa: E731
    return {"h": {L: store(out.hidden_states[L]) for L in layers}, "final": store(grabbed["final"]),
            "ids": top.indices.cpu().to(torch.int32), "logp": top.values.cpu().to(torch.float16)}


def collect(model, chunks, layers, top_k: int = TOP_K, progress=None) -> tuple[Collected, Collected]:
    """(train, held-out) from an iterable of (held_out, ids, start)."""
    parts = {False: [], True: []}
    for held_out, ids, start in chunks:
        parts[held_out].append(collect_one(model, ids, layers, top_k, start))
        if progress is not None:
            progress(len(ids) - start)
    return tuple(Collected.cat(parts[h], layers) for h in (False, True))


# 3) fit ------------------------------------------------------------------------------------

def ridge_start(h: torch.Tensor, final: torch.Tensor, rank: int, ridge: float = 1e-3):
    """(U, V, b) of rank r from least squares: h + U V^T h + b ~ s * final, s = rms(h)/rms(final)
    (the norm that follows ignores scale, so the target direction is kept at h's own scale)."""
    x, y = h.double(), final.double()
    s = x.pow(2).mean(-1, keepdim=True).sqrt() / y.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-12)
    delta = s * y - x  # [n, H]
    mx, md = x.mean(0), delta.mean(0)
    xc, dc = x - mx, delta - md
    gram = xc.T @ xc
    gram += ridge * gram.diagonal().mean() * torch.eye(gram.shape[0], dtype=gram.dtype)
    A = torch.linalg.solve(gram, xc.T @ dc).T  # [H, H]: delta ~ A x + c
    u, sv, vt = torch.linalg.svd(A)
    U = (u[:, :rank] * sv[:rank]).float()
    V = vt[:rank].T.float()
    b = (md - A @ mx).float()
    return U, V, b


def fit_layer(lens: ExitLens, layer: int, data: Collected, norm, head_weight: torch.Tensor,
              steps: int = 300, batch: int = 256, lr: float = 1e-3, seed: int = 0,
              ridge_init: bool = True, progress=None) -> list[float]:
    """Train lens[layer] on data; returns the loss (KL(final || lens) over the top-k, nats) per step."""
    k = str(layer)
    dtype = lens.U[k].dtype
    h = data.hidden[layer].to(dtype)
    if ridge_init:
        U, V, b = ridge_start(h, data.final_hidden.to(dtype), lens.rank)
        with torch.no_grad():
            lens.U[k].copy_(U), lens.V[k].copy_(V), lens.b[k].copy_(b)
    ids = data.top_ids.long()
    logp = data.top_logp.to(dtype)
    p = logp.exp()
    entropy_part = (p * logp).sum(-1)  # sum p log p over the top-k
    weight = head_weight.detach()
    for q in norm.parameters():
        q.requires_grad_(False)
    params = [lens.U[k], lens.V[k], lens.b[k]]
    opt = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 * (1 + math.cos(math.pi * i / max(1, steps))))
    g = torch.Generator().manual_seed(seed * 1000 + layer)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, data.n, (min(batch, data.n),), generator=g)
        # the softmax runs over the batch's final top-k tokens (in-batch negatives): the
        # tokens that matter, at a fraction of the full head's cost
        vocab = torch.unique(ids[idx])  # [V'] sorted
        W = weight[vocab].to(dtype)  # [V', H]
        logq = torch.log_softmax(norm(lens(layer, h[idx])) @ W.T, dim=-1)  # [B, V']
        target = torch.searchsorted(vocab, ids[idx])  # [B, k] into V'
        loss = (entropy_part[idx] - (p[idx] * logq.gather(1, target)).sum(-1)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if progress is not None:
            progress(losses[-1])
    return losses


# 4) report ---------------------------------------------------------------------------------

@torch.inference_mode()
def hit_table(lens: ExitLens | None, data: Collected, norm, head, ks=(1, 8), chunk: int = 256) -> dict:
    """{layer: {raw_top1, raw_top8, lens_top1, lens_top8}}: share of held-out positions whose
    final argmax is in the exit's top-k, with the full head."""
    final = data.top_ids[:, 0].long()
    dtype = head.weight.dtype
    out = {}
    for L in data.layers:
        counts = {}
        for use in ("raw", "lens") if lens is not None and L in lens.layers else ("raw",):
            hits = {k: 0 for k in ks}
            for i in range(0, data.n, chunk):
                h = data.hidden[L][i:i + chunk].to(dtype)
                if use == "lens":
                    h = lens.apply(L, h)
                top = head(norm(h)).topk(max(ks), dim=-1).indices  # [c, kmax]
                for k in ks:
                    hits[k] += int((top[:, :k] == final[i:i + chunk, None]).any(-1).sum())
            for k in ks:
                counts[f"{use}_top{k}"] = round(hits[k] / max(1, data.n), 4)
        out[L] = counts
    return out


def format_table(table: dict, n: int) -> str:
    layers = sorted(table)
    rows = [f"held-out positions: {n}", "",
            "| exit layer | " + " | ".join(map(str, layers)) + " |",
            "|---|" + "---|" * len(layers)]
    for key, label in (("raw_top1", "raw top-1"), ("lens_top1", "lens top-1"),
                       ("raw_top8", "raw top-8"), ("lens_top8", "lens top-8")):
        if any(key in table[L] for L in layers):
            rows.append(f"| {label} | " + " | ".join(
                f"{100 * table[L][key]:.1f}%" if key in table[L] else "-" for L in layers) + " |")
    return "\n".join(rows)


# 5) command line ---------------------------------------------------------------------------

def load_target(name: str):
    """(model, tokenizer, display name) of a target, fp32 as stored, on the CPU (no draft)."""
    from mirror_sd.models.loading import load_model
    loaded = load_model(name, "target")
    return loaded.model, loaded.tokenizer, loaded.source.name


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m mirror_sd.training.exit_lens", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="default")
    ap.add_argument("--layers", required=True, help="comma-separated exit layers, e.g. 14,18,21")
    ap.add_argument("--out", required=True, help="the lens file (.safetensors)")
    ap.add_argument("--tokens", type=int, default=20000, help="positions to collect (10%% held out)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rank", type=int, default=128)
    ap.add_argument("--steps", type=int, default=250, help="Adam steps per layer (0: the ridge start only)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--cache", default=None, help="keep the collected states in this .pt file "
                                                   "(reused when it exists and matches)")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    torch.manual_seed(args.seed)
    set_process_threads(args.threads)
    layers = sorted({int(x) for x in args.layers.split(",") if x.strip()})
    command = "python -m mirror_sd.training.exit_lens " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    t0 = time.perf_counter()
    try:
        model, tokenizer, name = load_target(args.target)
    except MirrorSDError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n_layers = model.config.num_hidden_layers
    bad = [L for L in layers if not 1 <= L <= n_layers - 1]
    if bad:
        print(f"error: exit layers must be between 1 and {n_layers - 1} (got {bad})", file=sys.stderr)
        return 2
    meta = target_meta(model)
    print(f"loaded {name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    train, held = _states(args, model, tokenizer, meta, layers)
    _, norm, head = exit_parts(model)
    body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    body.layers = torch.nn.ModuleList()  # only the final norm and the LM head are needed now
    lens = ExitLens(meta["hidden_size"], layers, args.rank)
    t2 = time.perf_counter()
    losses = _fit(args, lens, layers, train, norm, head)
    fit_s = time.perf_counter() - t2
    table = hit_table(lens, held, norm, head)
    report = {"held_out_positions": held.n, "train_positions": train.n,
              "layers": {str(L): v for L, v in table.items()},
              "train_kl_topk": {str(L): v for L, v in losses.items()},
              "fit_s": round(fit_s, 1), "total_s": round(time.perf_counter() - t0, 1)}
    lens.save(args.out, {**meta, "target": name, "command": command, "report": report,
                         "tokens": args.tokens, "seed": args.seed, "top_k": TOP_K})
    print(format_table(table, held.n))
    print(json.dumps(report, indent=1), file=sys.stderr)
    size = Path(args.out).stat().st_size
    print(f"saved {args.out} ({size / 1e6:.1f} MB) in {time.perf_counter() - t0:.0f} s total",
          file=sys.stderr)
    return 0


def _states(args, model, tokenizer, meta: dict, layers: list[int]):
    """(train, held out) states at the exit layers: collected, or reused from --cache."""
    from tqdm import tqdm

    key = {"meta": meta, "layers": layers, "tokens": args.tokens, "seed": args.seed}
    cache = Path(args.cache) if args.cache else None
    data = torch.load(cache) if cache and cache.is_file() else None
    if data is not None and data.get("key") == key:
        print(f"reusing the states collected in {cache}", file=sys.stderr)
        return tuple(Collected(**data[s]) for s in ("train", "held_out"))
    t1 = time.perf_counter()
    with tqdm(total=args.tokens, desc="collect", unit="tok") as bar:
        train, held = collect(model, sequences(tokenizer, args.seed, args.tokens), layers,
                              progress=bar.update)
    print(f"collected {train.n} + {held.n} positions in {time.perf_counter() - t1:.0f} s",
          file=sys.stderr)
    if cache:
        torch.save({"key": key, "train": train.to_dict(), "held_out": held.to_dict()}, cache)
    return train, held


def _fit(args, lens, layers: list[int], train, norm, head) -> dict:
    """Fit each layer of the lens; {layer: first and last training loss}."""
    from tqdm import tqdm

    losses = {}
    for L in layers:
        with tqdm(total=args.steps, desc=f"fit layer {L}", unit="step") as bar:
            def show(loss, bar=bar):
                bar.update()
                bar.set_postfix(kl=f"{loss:.3f}")
            ls = fit_layer(lens, L, train, norm, head.weight.detach(), steps=args.steps,
                           lr=args.lr, seed=args.seed, progress=show)
        if ls:
            losses[L] = {"first": round(ls[0], 4), "last": round(sum(ls[-20:]) / len(ls[-20:]), 4)}
    return losses


if __name__ == "__main__":
    raise SystemExit(main())
