"""Compatibility names: the settings, the run record and the decoder base now live in
settings.py, run.py and decoder.py."""
from mirror_sd.engine.decoder import Decoder
from mirror_sd.engine.run import Run, generator_for
from mirror_sd.engine.settings import Settings

__all__ = ["Decoder", "Run", "Settings", "generator_for"]
