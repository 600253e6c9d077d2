"""`python -m mirror_sd.bench`: see harness.py."""
from mirror_sd.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
