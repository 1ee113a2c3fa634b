#!/usr/bin/env python
"""`attnlab serve` under abuse on 127.0.0.1 (bounded; stops by itself): latency of normal requests alone, then
beside 20 clients sending heavy requests without pause, then beside 2,000 idle connections held open; the
server's RSS before and after, its log size, and its exit after SIGTERM.

    python benchmarks/server_abuse.py RUN_DIR [--json docs/results/issue13_server_abuse.json]

A normal request: a 10-word verse, beam 5. A heavy one: a 60-word verse, beam 12 (the API's maximum). Clients are
threads of this process (http.client, one connection per request), on the same 2 cores as the server.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_json  # noqa: E402

NORMAL = "And when even was come, he went out of the city."
HEAVY = ("And it came to pass in the days when the judges ruled, that there was a famine in the land. And a certain "
         "man of Bethlehemjudah went to sojourn in the country of Moab, he, and his wife, and his two sons, and "
         "the name of the man was Elimelech, and the name of his wife Naomi.")


def request(port: int, model: str, sentence: str, beam: int, timeout: float = 120) -> tuple[int, float]:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/api/translate", json.dumps({"model": model, "sentence": sentence, "beam": beam}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.perf_counter() - t0
    except OSError:
        return 0, time.perf_counter() - t0
    finally:
        conn.close()


def latencies(port: int, model: str, n: int) -> dict:
    runs = [request(port, model, NORMAL, 5) for _ in range(n)]
    ok = sorted(t for s, t in runs if s == 200)
    q = statistics.quantiles(ok, n=20) if len(ok) >= 2 else [float("nan")] * 19
    return {"requests": n, "answered_200": len(ok), "p50_ms": round(1000 * statistics.median(ok), 1) if ok else None,
            "p95_ms": round(1000 * q[18], 1), "statuses": sorted({s for s, _ in runs})}


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--normal", type=int, default=100, help="normal requests per phase")
    ap.add_argument("--heavy-clients", type=int, default=20)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    model = args.run_dir.name
    log_path = Path(f"/tmp/attnlab_serve_abuse_{os.getpid()}.log")
    with log_path.open("w") as log:
        server = subprocess.Popen([sys.executable, "-m", "attnlab.app.cli", "serve", str(args.run_dir), "--port",
                                   str(args.port)], stdout=log, stderr=log)
    try:
        deadline = time.time() + 120
        while request(args.port, model, "the", 1, timeout=5)[0] != 200:
            if time.time() > deadline or server.poll() is not None:
                raise SystemExit(f"server did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        out: dict = {"run": str(args.run_dir), "cpu": os.cpu_count(), "rss_kb_start": rss_kb(server.pid)}
        request(args.port, model, HEAVY, 12)  # warm-up of the heavy path
        out["alone"] = latencies(args.port, model, args.normal)
        print("alone", out["alone"], flush=True)

        stop, heavy_status = threading.Event(), []

        def heavy_client() -> None:
            while not stop.is_set():
                status, _ = request(args.port, model, HEAVY, 12)
                heavy_status.append(status)
                if status == 503:
                    time.sleep(0.2)  # a polite client would honour Retry-After; these barely wait

        threads = [threading.Thread(target=heavy_client, daemon=True) for _ in range(args.heavy_clients)]
        for t in threads:
            t.start()
        time.sleep(2)
        out["with_heavy"] = latencies(args.port, model, args.normal)
        stop.set()
        for t in threads:
            t.join(timeout=180)
        out["heavy_requests"] = {str(s): heavy_status.count(s) for s in sorted(set(heavy_status))}
        out["with_heavy"]["p95_over_alone"] = round(out["with_heavy"]["p95_ms"] / out["alone"]["p95_ms"], 2)
        print("with heavy", out["with_heavy"], out["heavy_requests"], flush=True)

        idle = []
        t0 = time.time()
        for _ in range(args.idle):
            try:
                idle.append(socket.create_connection(("127.0.0.1", args.port), timeout=10))
            except OSError as e:
                out["idle_open_error"] = str(e)
                break
        out["idle_opened"] = len(idle)
        out["with_idle"] = latencies(args.port, model, args.normal)
        out["with_idle"]["seconds_after_opening"] = round(time.time() - t0, 1)
        time.sleep(12)  # past the 10 s header timeout
        closed = 0
        for s in idle:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
            s.close()
        out["idle_closed_by_server_after_12s"] = closed
        print("with idle", out["with_idle"], f"opened {len(idle)}, closed by the server {closed}", flush=True)
        out["rss_kb_end"] = rss_kb(server.pid)
        out["after"] = latencies(args.port, model, 20)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            out_code = server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            out_code = "killed after 60 s"
    out["exit_after_sigterm"] = out_code
    out["log_bytes"] = log_path.stat().st_size
    out["log_tail"] = log_path.read_text(errors="replace")[-1000:]
    print(json.dumps({k: v for k, v in out.items() if k != "log_tail"}, indent=1))
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
