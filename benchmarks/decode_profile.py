#!/usr/bin/env python
"""Where attnlab's decoding time goes, beside CTranslate2's (issue 49, item 4): why CTranslate2 int8 is about 2x
attnlab eager at beam 5 and not 4x.

    python benchmarks/decode_profile.py RUN_DIR [--split test] [--beam 5] [--threads 2] [--rows 20] [--json OUT]

1. attnlab eager (PyTorch) decodes the split once untimed (warm-up), once timed, and once under torch.profiler
   (CPU operators, self time). The operators are grouped: matrix products (mm, addmm, bmm, baddbmm, linear,
   matmul, the scaled-dot-product kernels), and everything else; the wall time not spent inside any operator is the
   Python and dispatch overhead of the search.
2. CTranslate2 float32 and int8 (the run's `attnlab export`) decode the same sentences, best of --repeat.
   int8 replaces only the matrix products, so t_int8 = t_f32 * (1 - g + g / s), where g is the matrix products'
   share of CTranslate2's float32 time and s their int8 speed-up. With s unknown, g >= 1 - t_int8 / t_f32 (s
   infinite), and CTranslate2's time outside the matrix products is at least t_int8 - g_max * t_f32 / s_max for the
   largest s considered: the script reports the bound for s = 2, 4 and 8. The ratio CTranslate2 int8 could reach
   if its matrix products cost nothing is attnlab's time over that remainder.

Every engine decodes with the run's decode settings (batches of decode.batch_size sentences, sorted by length) on
--threads CPU threads.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from attnlab.decode.translate import Translator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit, machine, write_json  # noqa: E402
from ct2_bench import engines, timed  # noqa: E402  (the engines and timing of benchmarks/ct2_bench.py)

MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation",
              "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math",
              "aten::mkldnn_linear", "aten::_mkldnn_linear", "mkldnn::_linear_pointwise"}


def profile(translator: Translator, sentences: list[str], beam: int, rows: int) -> tuple[dict, str]:
    """One decode under torch.profiler: wall time, the operators' self CPU time grouped, and the table."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        translator.translate(sentences, beam_size=beam)
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS) / 1e6
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:rows]
    groups = {"wall_s": round(wall, 3), "operators_s": round(total, 3), "matmul_s": round(matmul, 3),
              "other_operators_s": round(total - matmul, 3), "outside_operators_s": round(max(wall - total, 0), 3),
              "top": [{"op": e.key, "self_s": round(e.self_cpu_time_total / 1e6, 4), "calls": e.count}
                      for e in top]}
    return groups, events.table(sort_by="self_cpu_time_total", row_limit=rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--split", default="test")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    found, src, _ = engines(args.run_dir, args.split, args.threads)
    ours = found["attnlab eager (PyTorch)"]
    ours.translate(src[:64], beam_size=args.beam)  # warm-up
    t_ours = timed(ours, src, args.beam, args.repeat)[1]
    groups, table = profile(ours, src, args.beam, args.rows)
    print(table)
    t_ct2 = {}
    for q in ("float32", "int8"):
        engine = found[f"CTranslate2 {q}"]
        engine.translate(src[:64], beam_size=args.beam)  # warm-up
        t_ct2[q] = timed(engine, src, args.beam, args.repeat)[1]
    f32, i8 = t_ct2["float32"], t_ct2["int8"]
    bounds = {}
    for s in (2, 4, 8):  # int8 matrix products s times as fast as float32's
        g = min(1.0, (1 - i8 / f32) / (1 - 1 / s))  # their share of CTranslate2's float32 time
        rest = (1 - g) * f32  # CTranslate2's time outside the matrix products, the same in int8
        bounds[f"s={s}"] = {"matmul_share_of_ct2_float32": round(g, 3), "ct2_time_outside_matmul_s": round(rest, 3),
                            "ratio_if_int8_matmul_were_free": round(t_ours / rest, 2) if rest > 0 else None}
    result = {"run": str(args.run_dir), "split": args.split, "sentences": len(src), "beam": args.beam,
              "threads": args.threads, "machine": machine("ctranslate2"), "commit": commit(),
              "attnlab_s": round(t_ours, 3), "ct2_float32_s": round(f32, 3), "ct2_int8_s": round(i8, 3),
              "int8_vs_attnlab": round(t_ours / i8, 2), "float32_vs_attnlab": round(t_ours / f32, 2),
              "attnlab_profile": groups, "bounds": bounds}
    print(write_json(args.json, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
