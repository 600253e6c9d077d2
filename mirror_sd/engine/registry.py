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
    label: str  # short display name (pane titles, table columns)
    title: str  # long display name

    @property
    def drafts(self) -> bool:
        """Whether the method uses the draft model."""
        return self.decoder.drafts


REGISTRY: dict[str, Method] = {m.name: m for m in (  # in teaching order: each adds to the one before
    Method("ar", Autoregressive, "AR", "Autoregressive (target only)"),
    Method("sd", Speculative, "SD", "Speculative decoding (draft, then verify)"),
    Method("mirror", MirrorSpeculative, "Mirror-SD", "Mirror-SD"),
)}

NAMES = tuple(REGISTRY)  # ("ar", "sd", "mirror")
METHODS = {name: m.decoder for name, m in REGISTRY.items()}  # name -> decoder class
LABELS = {name: m.label for name, m in REGISTRY.items()}  # name -> "AR" / "SD" / "Mirror-SD"
TITLES = {name: m.title for name, m in REGISTRY.items()}
