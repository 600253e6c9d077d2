"""One layer shape at a time: the AVX2 row kernel (native_int8) against fbgemm's RowInt8Linear,
1 and 2 threads, 1 and 4 rows, weights cold (enough copies of the layer to fill ~800 MB), and
the relative error of both against fp32 (docs/performance.md, "Kernels").

    python research/native_int8_layers.py
"""
import torch, time, statistics, warnings, sys
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..")); warnings.filterwarnings("ignore")
from mirror_sd.cpu.linears import RowInt8Linear
from mirror_sd.cpu.int8 import NativeInt8Linear
torch.manual_seed(0)
lin = torch.nn.Linear(1536, 2048)
nat = NativeInt8Linear(lin); row = RowInt8Linear(lin)
x = torch.randn(7, 1536)
with torch.no_grad():
    ref = lin(x); yn = nat(x); yr = row(x)
    print("rel err native", ((yn-ref).norm()/ref.norm()).item(), "fbgemm rows", ((yr-ref).norm()/ref.norm()).item())
    print("row-exact", all(torch.equal(nat(x[i:i+1])[0], yn[i]) for i in range(7)), torch.equal(nat(x[2:6]), yn[2:6]))
from script_timing import median_ms
def ms(f, n=7):
    return median_ms(f, n, warmup=1)
for shape in [(17920,1536),(1536,8960),(1536,1536)]:
    N = max(2, int(800e6 / (shape[0]*shape[1])))
    lins=[torch.nn.Linear(shape[1],shape[0]) for _ in range(N)]
    rows=[RowInt8Linear(l) for l in lins]; nats=[NativeInt8Linear(l) for l in lins]
    del lins
    mb=N*shape[0]*shape[1]/1e6
    for th in (1,2):
        torch.set_num_threads(th)
        for M in (1,4):
            x=torch.randn(M,shape[1])
            a=ms(lambda: [m(x) for m in rows]); b=ms(lambda: [m(x) for m in nats])
            print(shape, f"th={th} M={M} fbgemm-rows {mb/a:.1f}GB/s  native {mb/b:.1f}GB/s  ratio {a/b:.2f}", flush=True)
    del rows, nats
