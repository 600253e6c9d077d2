"""What runs one method on one prompt: the engine's decoders (and their variants with one
setting changed), transformers' assisted generation, and AR on a second copy of the target.

A runner is `runner(pair, prompt_ids, settings) -> MethodRun`; the harness needs nothing else
from a method.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from mirror_sd.engine.registry import LABELS as REGISTRY_LABELS
from mirror_sd.engine.registry import REGISTRY
from mirror_sd.engine.settings import DRAFTING_FIELDS, MIRROR_FIELDS, field_type
from mirror_sd.errors import MirrorSDError

HF_ASSISTED = "hf-assisted"
DEFAULT_METHODS = tuple(REGISTRY) + (HF_ASSISTED,)  # the --methods default: every method at import
# the engine's methods with one setting changed, to compare in the same interleaved run:
# the draft's stream heads on (streams.py), or Mirror-SD without the exit lens (the raw early
# exit at the paper's N/2 unless --exit-layer is given; exit_lens.py), or the draft's LM head cut
# to the shipped frequent-token vocabulary (draft_vocab.py)
VARIANTS = {"sd-streams": ("sd", {"streams": "auto"}), "mirror-streams": ("mirror", {"streams": "auto"}),
            "mirror-nolens": ("mirror", {"exit_lens": "off"}),
            "sd-vocab": ("sd", {"draft_vocab": "auto"}),
            "mirror-vocab": ("mirror", {"draft_vocab": "auto"})}
OTHER_LABELS = {HF_ASSISTED: "HF assisted", "sd-streams": "SD+streams",
                "mirror-streams": "Mirror-SD+streams", "mirror-nolens": "Mirror-SD, no lens",
                "sd-vocab": "SD, cut draft vocab", "mirror-vocab": "Mirror-SD, cut draft vocab"}


def label(method: str) -> str:
    """A method's display name: the registry's label, a variant's, else the name itself."""
    return REGISTRY_LABELS.get(method) or OTHER_LABELS.get(method, method)


def method_choices() -> tuple[str, ...]:
    """Every method --methods accepts by name now (a method registered later included)."""
    return tuple(REGISTRY) + (HF_ASSISTED,) + tuple(VARIANTS)


@dataclass
class MethodRun:
    """One generation by one method: what the harness needs from any runner."""
    token_ids: list[int]
    text: str
    stats: dict
    spans: list  # events.Span (or objects with lane, label, start_ns, end_ns, step, detail)
    wall_s: float
    start_ns: int = 0
    end_ns: int = 0
    error: str | None = None
    notices: list[str] = field(default_factory=list)


Runner = Callable[..., MethodRun]  # runner(pair, prompt_ids, settings) -> MethodRun


# settings a method name may change after a colon: "mirror:exit_layer=21:branch_budget=3":
# every drafting and Mirror-SD setting, with its type, from engine/settings.py
TUNABLE = {name: field_type(name) for name in DRAFTING_FIELDS + MIRROR_FIELDS}


def variant(method: str) -> tuple[str, dict]:
    """(engine method, setting changes) of a method name: ar / sd / mirror, a named variant
    (VARIANTS), or either followed by ":key=value" pairs from TUNABLE. Raises MirrorSDError."""
    name, *pairs = method.split(":")
    if name in VARIANTS:
        base, changes = VARIANTS[name][0], dict(VARIANTS[name][1])
    elif name in REGISTRY:
        base, changes = name, {}
    else:
        raise MirrorSDError(f"Unknown method {method!r}: choose from "
                            f"{', '.join(method_choices())}, optionally with "
                            f":key=value settings ({', '.join(TUNABLE)}).")
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in TUNABLE:
            raise MirrorSDError(f"Bad setting {pair!r} in method {method!r}: use key=value with a key "
                                f"from {', '.join(TUNABLE)}.")
        try:
            changes[key] = TUNABLE[key](value)
        except ValueError:
            raise MirrorSDError(f"Bad value in {pair!r} (method {method!r}): {key} takes "
                                f"{TUNABLE[key].__name__}.") from None
    return base, changes


def engine_runner(method: str) -> Runner:
    """A runner for one of the engine's decoders (engine/registry.py), or a variant of one."""

    def run(pair, prompt_ids, settings) -> MethodRun:
        from mirror_sd.bench.window_acceptance import window_facts
        from mirror_sd.engine.run_path import PreparedRun

        base, changes = variant(method)
        if changes:
            settings = replace(settings, **changes)
        record = PreparedRun(pair, prompt_ids, settings, (base,)).collect(base)
        stats = record.stats
        stats["method"] = method
        stats.update(window_facts(record.steps))  # per window: drafted and accepted (the pair report)
        return MethodRun(record.token_ids, record.text, stats, record.spans, record.wall_s,
                         record.start_ns, record.end_ns, record.error, record.notices)

    run.method = method
    return run


def _timing_hooks(model, lane: str, spans: list, first_label: str, label: str):
    """Forward hooks that record a Span per call of `model` (HF generate's own forwards)."""
    from mirror_sd.engine.events import Span
    from mirror_sd.models.pair import model_device
    from mirror_sd.placement import lane_sync

    device = model_device(model)
    state = {}

    def pre(module, args, kwargs):
        lane_sync(device)
        state["t"] = time.perf_counter_ns()

    def post(module, args, kwargs, output):
        lane_sync(device)
        end = time.perf_counter_ns()
        ids = kwargs.get("input_ids", args[0] if args else None)
        n = int(ids.shape[-1]) if hasattr(ids, "shape") else 0
        first = not any(s.lane == lane for s in spans)
        spans.append(Span(lane, first_label if first else label, state.pop("t", end), end,
                          sum(s.lane == lane for s in spans), f"{n} tokens"))

    return [model.register_forward_pre_hook(pre, with_kwargs=True),
            model.register_forward_hook(post, with_kwargs=True)]


def hf_assisted_generation_config(pair, settings, assistant_tokens: int | None = None):
    from transformers import GenerationConfig

    eos = sorted(pair.eos_token_ids)
    kw = dict(max_new_tokens=settings.max_new_tokens, do_sample=settings.temperature > 0,
              eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0,
              repetition_penalty=1.0)
    if settings.temperature > 0:
        kw.update(temperature=settings.temperature, top_p=settings.top_p,
                  top_k=settings.top_k if settings.top_k > 0 else None)
    else:
        kw.update(temperature=None, top_p=None, top_k=None)
    if assistant_tokens:
        kw.update(num_assistant_tokens=assistant_tokens, num_assistant_tokens_schedule="constant")
    return GenerationConfig(**kw)


class CommitTimes:
    """A transformers streamer that notes when generate() commits tokens: after the prompt
    (its first `put`), (perf_counter_ns, tokens) per put, as the engine's Commit events."""

    def __init__(self):
        self.prompt_seen = False
        self.commits: list[tuple[int, int]] = []

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.commits.append((time.perf_counter_ns(), int(value.numel())))

    def end(self) -> None:
        pass


def hf_assisted_runner(assistant_tokens: int | None = None) -> Runner:
    """transformers' own `target.generate(assistant_model=draft)`, timed with perf_counter_ns;
    for a draft with another tokenizer, with `tokenizer=` and `assistant_tokenizer=` (universal
    assisted generation).

    Its target and draft forwards are timed with forward hooks, so target forwards, mean
    accepted and the time breakdown are reported; its commits are timed by a streamer, so
    time to first token and decode speed follow the engine's definitions (split_prefill);
    drafted/accepted counts and hit rate are not observable there (null)."""

    def run(pair, prompt_ids, settings) -> MethodRun:
        spans: list = []
        commits = CommitTimes()
        new, error, t0, t1 = _hf_generate(pair, prompt_ids, settings, assistant_tokens, spans, commits)
        stats = _hf_stats(prompt_ids, new, spans, t0, t1, commits)
        return MethodRun(new, pair.decode(new), stats, spans, (t1 - t0) / 1e9, t0, t1, error)

    run.method = HF_ASSISTED
    return run


def _hf_generate(pair, prompt_ids, settings, assistant_tokens, spans: list, commits: CommitTimes):
    """One timed generate() with the draft as assistant: (new token ids, error or None, start
    and end perf_counter_ns); its forwards' spans land in `spans`, its commits in `commits`."""
    import torch

    from mirror_sd.models.pair import model_device
    from mirror_sd.placement import method_threads

    gc = hf_assisted_generation_config(pair, settings, assistant_tokens)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=model_device(pair.target))
    draft = getattr(pair, "draft_model", None) or pair.draft  # the model as loaded
    hooks = (_timing_hooks(pair.target, "target", spans, "prefill", "verify_forward")
             + _timing_hooks(draft, "draft", spans, "draft", "draft"))
    # a draft with another tokenizer: transformers' universal assisted generation
    cross = (dict(tokenizer=pair.tokenizer, assistant_tokenizer=pair.draft_tokenizer)
             if getattr(pair, "bridge", None) is not None else {})
    if cross and _vocab_size(pair.target) == _vocab_size(draft):
        for h in hooks:
            h.remove()
        now = time.perf_counter_ns()
        return [], ("not run: transformers tells a draft with another tokenizer by its vocabulary size, "
                    "and these two tokenizers differ at the same size"), now, now
    error = None
    torch.manual_seed(settings.seed)
    t0 = time.perf_counter_ns()
    try:
        with torch.inference_mode(), method_threads(pair, 1):  # one model at a time
            out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc,
                                       assistant_model=draft, streamer=commits, **cross)
        new = out[0, len(prompt_ids):].tolist()
    except Exception as e:  # reported in the results, the benchmark goes on
        error, new = f"{type(e).__name__}: {e}", []
    finally:
        t1 = time.perf_counter_ns()
        for h in hooks:
            h.remove()
    return new, error, t0, t1


def _hf_stats(prompt_ids, new: list[int], spans: list, t0: int, t1: int, commits: CommitTimes) -> dict:
    """The engine's statistics, as far as generate() lets them be observed."""
    from mirror_sd.engine.stats import draft_hidden_fraction, split_prefill

    wall = (t1 - t0) / 1e9
    forwards = sum(s.lane == "target" for s in spans)
    first = commits.commits[0] if commits.commits and new else None
    return {
        "method": HF_ASSISTED, "new_tokens": len(new), "wall_s": wall,
        "tokens_per_s": len(new) / wall if wall > 0 else 0.0,
        # its first commit comes after its first verify (the prompt and the first candidates)
        **split_prefill(t0, t1, len(new), (first[0], min(first[1], len(new))) if first else None),
        "target_forwards": forwards,
        "mean_accepted": len(new) / forwards if forwards else 0.0,
        "steps": forwards, "drafted": None, "accepted_drafts": None,
        "acceptance_rate": None, "hit_rate": None, "hits": None, "fallbacks": None,
        "draft_hidden_fraction": draft_hidden_fraction(spans), "cancelled": False,
        "prompt_tokens": len(prompt_ids),
        "draft_forwards": sum(s.lane == "draft" for s in spans),
    }


def baseline_runner(base_pair, name: str) -> Runner:
    """AR on another copy of the target (e.g. fp32 next to an int8 run): the precision's own
    speedup, measured in the same interleaved run."""
    inner = engine_runner("ar")

    def run(pair, prompt_ids, settings) -> MethodRun:
        return inner(base_pair, prompt_ids, settings)

    run.method = name
    return run


def baseline_name(precision: str) -> str:
    return f"ar-{precision}"


def _is_ar(method: str) -> bool:
    return method == "ar" or method.startswith("ar-")


def default_runners(hf_assistant_tokens: int | None = None) -> dict[str, Runner]:
    runners = {m: engine_runner(m) for m in tuple(REGISTRY) + tuple(VARIANTS)}
    runners[HF_ASSISTED] = hf_assisted_runner(hf_assistant_tokens)
    return runners


def _vocab_size(model) -> int | None:
    """The vocabulary size transformers compares to tell a cross-tokenizer assistant."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "vocab_size", None)
