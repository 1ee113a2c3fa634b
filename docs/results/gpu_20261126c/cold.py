import os, sys, time
t0 = time.perf_counter()
import torch
print("arch", torch.cuda.get_arch_list(), "lazy", os.environ.get("CUDA_MODULE_LOADING"), flush=True)
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter(); print(f"import torch + cuda init {t1 - t0:.2f}s", flush=True)
import attnlab.cli  # noqa: F401  (what the CLI imports)
t2 = time.perf_counter(); print(f"import attnlab.cli {t2 - t1:.2f}s", flush=True)
from attnlab import api
run = api.load("runs/gpu/base-2min", device="cuda")
t3 = time.perf_counter(); print(f"load {t3 - t2:.2f}s", flush=True)
for tag, n in (("first 64", 64), ("all 918 (cold rest)", 0), ("all 918 again", 0), ("first 64 greedy", 64)):
    s = time.perf_counter()
    r = run.evaluate("test", max_sentences=n, beam=1 if "greedy" in tag else None)
    torch.cuda.synchronize()
    print(f"{tag}: {time.perf_counter() - s:.2f}s bleu {r['bleu']:.2f}", flush=True)
