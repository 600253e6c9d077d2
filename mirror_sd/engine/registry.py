"""The decoding methods by their CLI names."""
from mirror_sd.engine.autoregressive import Autoregressive
from mirror_sd.engine.mirror.decoder import MirrorSpeculative
from mirror_sd.engine.speculative import Speculative

METHODS = {"ar": Autoregressive, "sd": Speculative, "mirror": MirrorSpeculative}
