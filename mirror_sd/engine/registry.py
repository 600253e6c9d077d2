"""The decoding methods: one entry per method, by its command-line name.

Everything that lists methods reads this table: the CLI's choices, the benchmark's methods,
the app's panes and their titles. A new method is a `Decoder` subclass (decoder.py) added
here, with the settings it reads in settings.USES.
"""
from __future__ import annotations

from dataclasses import dataclass

from mirror_sd.engine.autoregressive import Autoregressive
from mirror_sd.engine.decoder import Decoder
from mirror_sd.engine.mirror.decoder import MirrorSpeculative
from mirror_sd.engine.speculative import Speculative


@dataclass(frozen=True)
class Method:
    name: str  # the command-line name
    decoder: type[Decoder]
    label: str  # short display name (pane titles, table columns, legends, timeline lanes)
    title: str  # long display name
    colour: str  # the method's colour in the app (pane names, timeline, charts)

    @property
    def drafts(self) -> bool:
        """Whether the method uses the draft model."""
        return self.decoder.drafts

    @property
    def uses(self) -> tuple[str, ...]:
        """The settings the method reads (checked before loading; shown in the app)."""
        from mirror_sd.engine.settings import USES
        return USES[self.name]


REGISTRY: dict[str, Method] = {m.name: m for m in (  # in teaching order: each adds to the one before
    Method("ar", Autoregressive, "AR", "Autoregressive (target only)", "#64748b"),
    Method("sd", Speculative, "SD", "Speculative decoding (draft, then verify)", "#16a34a"),
    Method("mirror", MirrorSpeculative, "Mirror-SD", "Mirror-SD", "#2563eb"),
)}

NAMES = tuple(REGISTRY)  # ("ar", "sd", "mirror")
METHODS = {name: m.decoder for name, m in REGISTRY.items()}  # name -> decoder class
LABELS = {name: m.label for name, m in REGISTRY.items()}  # name -> "AR" / "SD" / "Mirror-SD"
TITLES = {name: m.title for name, m in REGISTRY.items()}
COLOURS = {name: m.colour for name, m in REGISTRY.items()}
