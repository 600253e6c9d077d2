"""The default draft (0.5B) at int8 (the AVX2 row kernel) against int8-dyn (fbgemm, one
activation scale per batch), interleaved: median ms of 10 forwards at a 100-token context,
decode 1 row, a batch of 4 rows (branch rollouts), 4 tokens of one row; 1 and 2 threads
(docs/performance.md, "Kernels").

    python research/draft_int8_ab.py
"""
import sys, time, statistics, warnings
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..")); warnings.filterwarnings("ignore")
import torch
from transformers import DynamicCache
from mirror_sd.models.loading import load_pair
a = load_pair(precision="int8", draft_precision="int8").draft
b = load_pair(precision="int8", draft_precision="int8-dyn").draft
print(type(a.lm_head).__name__, type(b.lm_head).__name__)
ids = torch.randint(0, 20000, (4, 108))
@torch.inference_mode()
def t(model, rows, batch=1, n=10):
    c = DynamicCache(config=model.config); model(ids[:batch, :100], past_key_values=c, use_cache=True, logits_to_keep=1)
    r=[]
    for i in range(n+2):
        s=time.perf_counter_ns(); model(ids[:batch, 100:100+rows], past_key_values=c, use_cache=True); 
        if i>=2: r.append((time.perf_counter_ns()-s)/1e6)
        c.crop(-rows)
    return statistics.median(r)
res={}
for rnd in range(4):
    for th in (1,2):
        torch.set_num_threads(th)
        for (rows,batch) in ((1,1),(1,4),(4,1)):
            for name, m in ((("native int8",a),("int8-dyn",b)) if rnd%2 else (("int8-dyn",b),("native int8",a))):
                res.setdefault((th,rows,batch,name),[]).append(t(m,rows,batch))
for k,v in sorted(res.items()): print(k, "%.1f" % statistics.median(v))
