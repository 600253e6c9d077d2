"""The app's start: the default pair loaded and warmed up in the background (launch() starts
it; never at import, never in test mode), so that the first Run finds it ready."""
from __future__ import annotations

import logging
import threading
import time

from mirror_sd.engine.registry import REGISTRY
from mirror_sd.engine.settings import Settings
from mirror_sd.engine.warmup import warm_up
from mirror_sd.errors import MirrorSDError
from mirror_sd.models.kernels import build_native_kernel, needs_native_kernel

from .paircheck import ensure_check
from .session import PairCache, PairSpec
from .texts import parse_prompt

log = logging.getLogger(__name__)


class Preparer(threading.Thread):
    """Started by the app's launch: loads the default pair (converting the bundled GGUF files
    the first time) so that the first Run finds it loaded, builds the AVX2 kernel beside the
    conversion when the precision needs it (the build is one process on the other core), then
    checks the pair (paircheck.py) and warms every method up. A failure is logged; the first
    Run then tries again and says why."""

    def __init__(self, pairs: PairCache, spec: PairSpec, prompt: str, settings: Settings):
        super().__init__(name="mirror-sd-prepare", daemon=True)
        self.pairs, self.spec, self.prompt, self.settings = pairs, spec, prompt, settings
        self.message = "starting"
        self.since = time.monotonic()
        self.done = threading.Event()
        self.error: str | None = None

    def describe(self) -> str:
        """What it is doing, in a line; '' once done without error."""
        if self.done.is_set():
            return f"The background preparation failed: {self.error}" if self.error else ""
        return self.pairs.describe() or f"{self.message}, {time.monotonic() - self.since:.0f} s so far"

    def run(self) -> None:
        try:
            if needs_native_kernel(self.spec.precision, self.spec.target_device):
                threading.Thread(target=_build_kernel, name="mirror-sd-kernel", daemon=True).start()
            loaded = self.pairs.get(self.spec, lambda message, fraction=None: None)
            prompt_ids = loaded.pair.encode_prompt(parse_prompt(self.prompt))
            with loaded.lock:
                self.message = "Preparing in the background: checking the pair"
                ensure_check(loaded)

                def say(message: str, fraction: float | None) -> None:
                    self.message = f"Preparing in the background: {message}"
                warm_up(loaded.pair, tuple(REGISTRY), self.settings, prompt_ids, done=loaded.warmed,
                        say=say)
        except Exception as e:  # the first Run loads again and shows the message
            log.exception("background preparation failed")
            self.error = str(e) if isinstance(e, MirrorSDError) else f"{type(e).__name__}: {e}"
        finally:
            self.done.set()


def _build_kernel() -> None:
    try:
        build_native_kernel()  # one compiler job beside the conversion (load_pair waits)
    except Exception:  # the conversion reports what it needs; fbgemm where it cannot build
        log.exception("kernel build failed")
