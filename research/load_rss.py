"""Peak and current RSS of loading the default pair (int8 target, int8-dyn draft by default),
read from /proc/self/status after each phase of load_pair.

    python research/load_rss.py [TARGET_PRECISION] [DRAFT_PRECISION]
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.models import loading  # noqa: E402


def rss() -> str:
    with open("/proc/self/status") as f:
        kv = dict(line.split(":", 1) for line in f
                  if line.startswith(("VmHWM", "VmRSS", "RssAnon", "RssFile")))
    return ", ".join(f"{k} {int(v.split()[0]) / 1024 ** 2:.2f}" for k, v in kv.items()) + " GB"


t0 = time.perf_counter()


def show(message, fraction=None):
    print(f"[{time.perf_counter() - t0:5.1f} s] {message[:50]:<50} {rss()}", flush=True)


_convert = loading.convert_lean


def convert_lean(model, name, role, *rest):  # RSS on each side of the precision conversion
    show(f"{role}: convert_lean({name}) starts")
    model = _convert(model, name, role, *rest)
    show(f"{role}: convert_lean({name}) ends")
    return model


loading.convert_lean = convert_lean  # what load_pair calls to convert a loaded model
target_prec = sys.argv[1] if len(sys.argv) > 1 else "int8"
draft_prec = sys.argv[2] if len(sys.argv) > 2 else "int8-dyn"
pair = loading.load_pair("default", "default", target_precision=target_prec,
                         draft_precision=draft_prec, target_device="cpu", draft_device="cpu",
                         progress=show)
show(f"loaded: target {target_prec}, draft {draft_prec}")
