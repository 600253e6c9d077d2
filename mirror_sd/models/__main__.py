"""`python -m mirror_sd.models --prepare-default`: build the default pair's cache (bundled.py)."""
import logging

from mirror_sd.models.bundled import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    raise SystemExit(main())
