"""The decoding methods by their CLI names."""
from .autoregressive import Autoregressive
from .mirror import MirrorSpeculative
from .speculative import Speculative

METHODS = {"ar": Autoregressive, "sd": Speculative, "mirror": MirrorSpeculative}
