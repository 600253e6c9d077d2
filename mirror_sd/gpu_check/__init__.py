"""A GPU check ready to run: AR, SD and Mirror-SD in each device configuration a single GPU
allows (placement.CONFIGURATIONS), against transformers' `generate()`, with the lanes' overlap
measured from timed spans (CUDA events where both lanes share the GPU), in under 8 minutes.

    python -m mirror_sd.gpu_check --prepare .gpu        # here, once: config + tokenizer (~10 MB)
    python -m mirror_sd.gpu_check --out out/gpu_check    # on the GPU machine
    python -m mirror_sd.gpu_check --out DIR --dry-run    # here: the same code path on the CPU

Writes DIR/gpu_check.json and DIR/gpu_check.md. The dry run takes a few tokens on the CPU with
the bundled pair (the tiny pair where the bundled pair's cache is not built; the report says
which) and reports each configuration that needs a GPU as skipped, with the reason.
models.py: which pair; measure.py: the methods and the overlap; report.py: the two files.
"""
from mirror_sd.gpu_check.cli import main  # noqa: F401
