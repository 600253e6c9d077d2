"""`python -m mirror_sd.models --prepare-default` (or `--prepare gemma-3-270m`, `--prepare all`):
build bundled models' caches (bundled.py)."""
import logging

from mirror_sd.models.bundled import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    raise SystemExit(main())
