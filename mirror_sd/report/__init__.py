"""The pair report: is this draft any good for this target, on this machine and on others.

`python -m mirror_sd pair-report --target T --draft D [--draft D2 ...]` (cli.py) runs a
small Spec-Bench-format set through the benchmark's harness (bench/harness.py: AR, SD,
Mirror-SD and transformers' assisted generation, interleaved) and reads off it:
acceptance (acceptance.py: tau, the rate per window position, the histogram of accepted
counts, per task group), the measured costs and speedups, the What-if projections and the
settings the latency model recommends (figures.py), and writes JSON, markdown and plotly
HTML (render.py). checks.py refuses a pair that cannot work before anything loads.
"""
