#!/usr/bin/env python
"""Batch invariance of `attnlab serve` (issue 19): does a request get the same answer whatever else is decoded
with it?

    python benchmarks/batch_invariance.py RNN_RUN TRANSFORMER_RUN [--requests 500] [--clients 25]
        [--json docs/results/issue19_batch_invariance.json] [--src DIR] [--no-nbest]

Starts `attnlab serve` on both runs (a subprocess on a free 127.0.0.1 port, `--src` chooses the attnlab source
tree it runs, default this checkout's src/), takes 50 test verses of the Bible (10-30 words), and builds
`--requests` requests cycling over (sentence, model, beam 1 or 5), each asking n_best = beam. Every distinct
request is first sent alone (one at a time, nothing else in flight); then all requests are sent by `--clients`
concurrent clients (threads, one connection per request) in a seeded random order. Each concurrent answer is
compared with the same request's answer alone: translation text, n-best (texts and order), score, attention
(every weight). Prints and writes one JSON object: mismatch counts, the largest score and attention difference,
and the throughput and latency of the concurrent phase. `--no-nbest`: omit n_best (servers before issue 19).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import free_port, write_json  # noqa: E402

from attnlab.data.bible import bible_corpus  # noqa: E402


def post(port: int, body: dict, timeout: float = 300) -> tuple[int, dict, float]:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/api/translate", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), time.perf_counter() - t0
    finally:
        conn.close()


def start_server(runs: list[Path], src: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.app.cli", "serve", *map(str, runs), "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {proc.stderr.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the server did not start within 300 s")


def max_abs_diff(a, b) -> float:
    """Largest |a - b| over two equally nested lists of floats; inf when their shapes differ."""
    if isinstance(a, list) or isinstance(b, list):
        if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b):
            return float("inf")
        return max((max_abs_diff(x, y) for x, y in zip(a, b)), default=0.0)
    if a is None or b is None:
        return 0.0 if a is b else float("inf")
    return abs(a - b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rnn_run", type=Path)
    ap.add_argument("transformer_run", type=Path)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--clients", type=int, default=25)
    ap.add_argument("--sentences", type=int, default=50)
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="attnlab source tree the server runs")
    ap.add_argument("--no-nbest", action="store_true", help="do not ask for n_best (servers before issue 19)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    verses = [p.src for p in bible_corpus("kjv").test if 10 <= len(p.src.split()) <= 30][: args.sentences]
    models = [args.rnn_run.name, args.transformer_run.name]
    combos = [(s, m, beam) for beam in (1, 5) for m in models for s in verses]
    requests = [combos[i % len(combos)] for i in range(args.requests)]

    def body(s: str, m: str, beam: int) -> dict:
        return {"model": m, "sentence": s, "beam": beam, **({} if args.no_nbest else {"n_best": beam})}

    port = free_port()
    server = start_server([args.rnn_run, args.transformer_run], args.src, port)
    try:
        t0 = time.perf_counter()
        alone = {}
        for key in dict.fromkeys(requests):
            status, data, _ = post(port, body(*key))
            assert status == 200, (key, status, data)
            alone[key] = data
        alone_seconds = time.perf_counter() - t0
        order = list(range(len(requests)))
        random.Random(args.seed).shuffle(order)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            answers = dict(zip(order, pool.map(lambda i: post(port, body(*requests[i])), order)))
        wall = time.perf_counter() - t0
    finally:
        server.terminate()
        server.wait(60)

    result = {"requests": len(requests), "distinct_requests": len(alone), "sentences": len(verses),
              "clients": args.clients, "models": models, "beams": [1, 5], "n_best": not args.no_nbest,
              "src": str(args.src), "non_200": 0, "text_mismatches": 0, "nbest_mismatches": 0,
              "token_mismatches": 0, "score_mismatches": 0, "attention_mismatches": 0,
              "max_score_diff": 0.0, "max_attention_diff": 0.0}
    latencies = []
    for i, key in enumerate(requests):
        status, got, seconds = answers[i]
        want = alone[key]
        if status != 200:
            result["non_200"] += 1
            continue
        latencies.append(seconds)
        result["text_mismatches"] += got["translation"] != want["translation"]
        result["token_mismatches"] += (got["src_tokens"], got["tgt_tokens"]) != (want["src_tokens"], want["tgt_tokens"])
        if "nbest" in want:
            result["nbest_mismatches"] += [h["translation"] for h in got["nbest"]] != \
                [h["translation"] for h in want["nbest"]]
        score_diff = max([abs(got["score"] - want["score"])] +
                         [abs(a["score"] - b["score"]) for a, b in zip(got.get("nbest", []), want.get("nbest", []))])
        att_diff = max_abs_diff(got["attention"], want["attention"])
        result["score_mismatches"] += score_diff != 0
        result["attention_mismatches"] += att_diff != 0
        result["max_score_diff"] = max(result["max_score_diff"], score_diff)
        result["max_attention_diff"] = max(result["max_attention_diff"], att_diff)
    latencies.sort()
    result.update({"alone_phase_seconds": round(alone_seconds, 2), "concurrent_phase_seconds": round(wall, 2),
                   "requests_per_second": round(len(requests) / wall, 2),
                   "latency_p50_s": round(statistics.median(latencies), 3),
                   "latency_p95_s": round(statistics.quantiles(latencies, n=20)[18], 3)})
    print(write_json(args.json, result, indent=None))


if __name__ == "__main__":
    main()
