"""The one exit-layer rule: at which target layer Mirror-SD reads its early exit.

- given (Settings.exit_layer): that layer; the exit lens is used only if it covers it;
- else, with a trained exit lens that reports held-out hit rates: the lens layer with the
  least expected step time (proposals/exit_lens.choose_exit_layer), from those hit rates
  and the lanes' speeds measured once per pair (`lane_speeds`);
- else the paper's default, N/2.

The decoder, the benchmark and the auto-tuning probe all take the layer from here, or from
the stats of a Mirror-SD run (`ran_at`), so the prefix/suffix split they report or project is
the one Mirror-SD runs.
"""
from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass, field

import torch

from mirror_sd.engine.lanes import Lane
from mirror_sd.proposals.exit_lens import LensChoice, choose_exit_layer, find_lens

PROBE_PREFIX = 16  # tokens of context before the timed forwards
_speeds: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_speeds_lock = threading.Lock()


def default_exit_layer(pair) -> int:
    """The paper's default, N/2 (used when there is no exit lens to choose with)."""
    return max(1, pair.target_layers // 2)


@torch.inference_mode()
def lane_speeds(pair, gamma: int, reps: int = 2) -> tuple[float, float]:
    """(seconds of one target forward over gamma+1 tokens, seconds of one draft token), each
    measured alone after a short prefix, best of `reps`; once per (pair, gamma)."""
    head = pair.draft.get_output_embeddings()  # a cut proposal head is timed as such
    key = (id(pair.draft), gamma, bool(getattr(head, "active", False)))
    with _speeds_lock:
        cached = _speeds.setdefault(pair.target, {})
        if key in cached:
            return cached[key]
        probe = [1 + i % (pair.vocab_size - 1) for i in range(PROBE_PREFIX + gamma + 1)]
        prefix, window = probe[:PROBE_PREFIX], probe[PROBE_PREFIX:]

        def timed(model, chunks):
            best = float("inf")
            for _ in range(reps):
                lane = Lane(model, "probe")
                lane.feed(prefix, logits_to_keep=1)
                lane.synchronize()
                t0 = time.perf_counter()
                for chunk in chunks:
                    lane.feed(chunk, logits_to_keep=len(chunk))
                lane.synchronize()
                best = min(best, time.perf_counter() - t0)
            return best

        t_verify = timed(pair.target, [window])  # gamma+1 tokens in one forward
        t_draft = timed(pair.draft, [[t] for t in window[:gamma]]) / gamma  # one token per forward
        cached[key] = (t_verify, t_draft)
        return cached[key]


@dataclass
class ExitChoice:
    layer: int
    rule: str  # how the layer was chosen, in words (run info)
    found: LensChoice  # the exit lens asked for, as found for the target
    notices: list[str] = field(default_factory=list)  # what the user should be told

    @property
    def lens(self):
        """The lens the exit head reads through at `layer`, or None (the raw early exit)."""
        return self.found.lens if self.found.covers(self.layer) else None

    @property
    def note(self) -> str:
        """One line on the lens: the last notice when there is one, else what was found."""
        return self.notices[-1] if self.notices else self.found.message


def choose_exit_layer_for(pair, settings) -> ExitChoice:
    """The exit layer Mirror-SD runs at for this pair and these settings (see the module)."""
    found = find_lens(pair.target, settings.exit_lens)
    notices = [found.message] if found.notify else []
    if settings.exit_layer:
        layer = settings.exit_layer
        rule = "given"
        if found.lens is not None and not found.covers(layer):
            notices.append(f"The exit lens covers layers {', '.join(map(str, found.lens.layers))}, "
                           f"not {layer}: raw early exit at layer {layer}.")
    elif found.lens is not None and found.lens.hit_rates():
        t_verify, t_draft = lane_speeds(pair, settings.gamma)
        rates = found.lens.hit_rates()
        layer = choose_exit_layer(rates, pair.target_layers, t_verify, (settings.gamma + 1) * t_draft)
        rule = (f"least expected step time over the lens's layers {sorted(rates)} (held-out top-8 "
                f"{rates[layer]:.0%} at {layer}; target verify {t_verify * 1e3:.0f} ms, draft "
                f"{t_draft * 1e3:.0f} ms/token, measured)")
    else:
        layer = default_exit_layer(pair)
        rule = "N/2 (no exit lens)"
    return ExitChoice(layer, rule, found, notices)


def ran_at(stats_list) -> int | None:
    """The exit layer in the first Mirror-SD run's stats that reports one (None if none)."""
    return next((s["exit_layer"] for s in stats_list if s and s.get("exit_layer")), None)
