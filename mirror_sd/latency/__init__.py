"""The step-time model of the engine's methods (step_model.py: the paper's eq. 10 and its
what-if projections) and its calibration from measured spans (latency_model.py).

Pure Python, no torch and no other mirror_sd module: the benchmark, the auto-tuning
(engine/tuning.py) and the app read it from below.
"""
