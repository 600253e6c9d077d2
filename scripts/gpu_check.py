"""Kept for old command lines: the GPU check is the module `python -m mirror_sd.gpu_check`
(same flags; see mirror_sd/gpu_check/__init__.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from mirror_sd.gpu_check.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
