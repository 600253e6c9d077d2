"""How far a precision moves a model of the default pair from its fp32 self: on the first 400
tokens of the standard library's json/decoder.py, the share of positions whose top-1 token
equals fp32's and the mean KL(fp32 || precision); with fast_layers and with the lean layers
(transformers' arithmetic) where fast layers are installed (docs/performance.md, "Precisions").

    python research/precision_quality.py --model draft --precisions int8,int4
"""
import inspect
import json.decoder
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from mirror_sd.cpu import fast_layers  # noqa: E402
from mirror_sd.models.loading import DEFAULT_DRAFT, DEFAULT_TARGET, default_cache_dir  # noqa: E402
from script_timing import default_model, lean_copy, model_args  # noqa: E402


@torch.inference_mode()
def main():
    args = model_args(precisions="int8,int4")
    bundled = DEFAULT_DRAFT if args.model == "draft" else DEFAULT_TARGET
    tok = AutoTokenizer.from_pretrained(default_cache_dir() / f"{bundled.stem}-hf")
    ids = tok(inspect.getsource(json.decoder)[:3000], return_tensors="pt").input_ids[:, :400]
    ref = default_model(args.model, "fp32")(ids).logits[0].log_softmax(-1)
    print("| precision | layers | top-1 equal to fp32 | KL(fp32 || it) |")
    print("|---|---|---|---|")
    for name in args.precisions.split(","):
        model = default_model(args.model, name)
        variants = {"fast" if fast_layers.installed(model) else "lean": model}
        if fast_layers.installed(model):
            variants["lean"] = lean_copy(model)
        for kind, m in variants.items():
            lp = m(ids).logits[0].log_softmax(-1)
            kl = float((ref.exp() * (ref - lp)).sum(-1).mean())
            agree = float((lp.argmax(-1) == ref.argmax(-1)).float().mean())
            print(f"| {name} | {kind} | {agree:.3f} | {kl:.4f} |")


if __name__ == "__main__":
    main()
