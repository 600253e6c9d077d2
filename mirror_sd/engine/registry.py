"""The decoding methods: one entry per method, by its command-line name; the one method table.

Everything that lists methods reads this table, in its order (the display order): the CLI's
choices, the benchmark's methods, the app's panes, legends and timeline lanes. A method plugs
in as a `Decoder` subclass (decoder.py) and one `register(Method(...))`: its name, decoder,
label, title, colour, the settings it reads (`uses`: the field-name tuples of settings.py;
`Settings.check(name)` checks exactly those) and its facts (`drafts`, from the decoder;
`early_exit`, `modelled`, `baseline`), which the entry points read through `having(**facts)`
instead of naming methods. `unregister(name)` takes it out again (tests).
"""
from __future__ import annotations

from dataclasses import dataclass

from mirror_sd.engine import settings as settings_module
from mirror_sd.engine.autoregressive import Autoregressive
from mirror_sd.engine.decoder import Decoder
from mirror_sd.engine.mirror.decoder import MirrorSpeculative
from mirror_sd.engine.settings import DRAFTING_FIELDS, MIRROR_FIELDS, SAMPLING_FIELDS
from mirror_sd.engine.speculative import Speculative
from mirror_sd.errors import MirrorSDError


@dataclass(frozen=True)
class Method:
    name: str  # the command-line name
    decoder: type[Decoder]
    label: str  # short display name (pane titles, table columns, legends, timeline lanes)
    title: str  # long display name
    colour: str  # the method's colour in the app (pane names, timeline, charts)
    uses: tuple[str, ...]  # the settings it reads: checked before loading, shown in the app
    # facts the entry points read instead of method names:
    early_exit: bool = False  # reads the target's early exit (the app's exit layer, the zoom)
    modelled: bool = False  # the latency model calibrates and projects it under this name
    baseline: bool = False  # the reference: every speedup is over it, every output checked against it

    @property
    def drafts(self) -> bool:
        """Whether the method uses the draft model."""
        return self.decoder.drafts

    def check(self, settings) -> None:
        """Raise MirrorSDError for the first bad value among the settings this method reads."""
        settings.check(self.uses)


REGISTRY: dict[str, Method] = {}
# views of REGISTRY, kept in step by register / unregister (same order)
NAMES: list[str] = []  # ["ar", "sd", "mirror", ...]
METHODS: dict[str, type[Decoder]] = {}  # name -> decoder class
LABELS: dict[str, str] = {}  # name -> "AR" / "SD" / "Mirror-SD"
TITLES: dict[str, str] = {}
COLOURS: dict[str, str] = {}


def register(method: Method) -> Method:
    """Add a method (after the ones there, so last in display order). A name already
    registered is refused: unregister it first."""
    if method.name in REGISTRY:
        raise MirrorSDError(f"A method named {method.name!r} is already registered.")
    unknown = set(method.uses) - set(settings_module.ALL_FIELDS)
    if unknown:
        raise MirrorSDError(f"Method {method.name!r} reads settings that do not exist: "
                            f"{', '.join(sorted(unknown))}.")
    REGISTRY[method.name] = method
    _sync()
    return method


def unregister(name: str) -> None:
    """Take a registered method out (a test's toy method, after the test)."""
    REGISTRY.pop(name, None)
    _sync()


def having(**facts) -> tuple[str, ...]:
    """The registered methods with these facts, in display order: having(drafts=True),
    having(modelled=True, early_exit=False), ..."""
    return tuple(n for n, m in REGISTRY.items() if all(getattr(m, k) == v for k, v in facts.items()))


def baseline() -> str:
    """The reference method's name (AR): speedups are over it."""
    return next(n for n, m in REGISTRY.items() if m.baseline)


def _sync() -> None:
    NAMES[:] = list(REGISTRY)
    for view, attr in ((METHODS, "decoder"), (LABELS, "label"), (TITLES, "title"), (COLOURS, "colour")):
        view.clear()
        view.update({name: getattr(m, attr) for name, m in REGISTRY.items()})
    settings_module.METHOD_USES.clear()
    settings_module.METHOD_USES.update({name: m.uses for name, m in REGISTRY.items()})


for _method in (  # in teaching order: each adds to the one before
    Method("ar", Autoregressive, "AR", "Autoregressive (target only)", "#64748b", SAMPLING_FIELDS,
           modelled=True, baseline=True),
    Method("sd", Speculative, "SD", "Speculative decoding (draft, then verify)", "#15803d",
           SAMPLING_FIELDS + DRAFTING_FIELDS, modelled=True),
    Method("mirror", MirrorSpeculative, "Mirror-SD", "Mirror-SD", "#2563eb",
           SAMPLING_FIELDS + DRAFTING_FIELDS + MIRROR_FIELDS, early_exit=True, modelled=True),
):
    register(_method)
