"""A toy decoding method for tests of "a method plugs in": `ToyDecoder` is the target alone
(AR's loop) under its own name, and `registered()` puts it in the registry for the length of a
test (the benchmark's --methods, the app's panes read it from there) and takes it out after."""
from __future__ import annotations

from contextlib import contextmanager

from mirror_sd.engine import registry
from mirror_sd.engine.autoregressive import Autoregressive
from mirror_sd.engine.settings import SAMPLING_FIELDS

NAME = "toy"


class ToyDecoder(Autoregressive):
    """AR's events under the name "toy": one target forward per token."""
    method = NAME


TOY = registry.Method(NAME, ToyDecoder, "Toy", "A toy method (the target alone, renamed)",
                      "#a855f7", SAMPLING_FIELDS)


@contextmanager
def registered(method: registry.Method = TOY):
    registry.register(method)
    try:
        yield method
    finally:
        registry.unregister(method.name)
