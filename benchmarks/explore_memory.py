#!/usr/bin/env python
"""The server's exploration budget under load (issue 47): `attnlab serve --explore-memory MIB` keeps the most
recently used explorations within MIB mebibytes, counting what an exploration really holds (its tensors and its
Python objects), so that thousands of explorations leave the server's resident memory (RSS) within the budget
plus the models and the baseline, and the oldest answers 410.

    python benchmarks/explore_memory.py [RUN ...] [--explorations 5000] [--explore-memory 64] [--clients 4]
                                        [--json docs/results/issue47/explore_memory.json]

RUN defaults to the shipped GRU (Bahdanau) and Transformer (`pretrained:bahdanau pretrained:transformer`). The
server runs in its own process; its RSS is read from /proc (VmRSS) after the models are loaded and one exploration
of each is answered (the baseline), then every 100 explorations, and its peak (VmHWM) at the end. Explorations
cycle through a list of verses and beams, alternating the models; the first exploration's follow-up fetch must
answer 410 at the end, the last one's 200.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit, free_port, machine, write_json  # noqa: E402

VERSES = ["In the beginning God created the heaven and the earth.",
          "And God said, Let there be light: and there was light.",
          "Jesus wept.",
          "The LORD is my shepherd; I shall not want.",
          "For God so loved the world, that he gave his only begotten Son, that whosoever believeth in him should "
          "not perish, but have everlasting life.",
          "And the name of the man was Elimelech, and the name of his wife Naomi.",
          "Blessed are the meek: for they shall inherit the earth.",
          "And the earth was without form, and void; and darkness was upon the face of the deep."]
BEAMS = (1, 5, 12)


def call(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request(method, path, None if body is None else json.dumps(body),
                     {"Content-Type": "application/json"} if body is not None else {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else {}
    finally:
        conn.close()


def memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (the peak) of a process, in MiB."""
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", default=["pretrained:bahdanau", "pretrained:transformer"])
    ap.add_argument("--explorations", type=int, default=5000)
    ap.add_argument("--explore-memory", type=int, default=64, help="the server's budget in MiB")
    ap.add_argument("--clients", type=int, default=4, help="explorations in flight at once")
    ap.add_argument("--warm-all", action="store_true",
                    help="take the baseline after one exploration of every model, verse and beam (their working "
                         "buffers, which the allocator keeps, then count as baseline; the warm-up explorations "
                         "themselves stay in the budget); default: one greedy exploration of each model")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    port = free_port()
    attnlab = Path(sys.executable).with_name("attnlab")
    server = subprocess.Popen([str(attnlab), "serve", *args.runs, "--port", str(port),
                               "--explore-memory", str(args.explore_memory)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for _ in range(600):
            try:
                status, models = call(port, "GET", "/api/models")
                if status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        else:
            raise SystemExit("the server did not start: " + server.stderr.read()[-2000:])
        names = [m["name"] for m in models]
        warm = [{"model": name, "sentence": verse, "beam": beam} for name in names
                for verse in (VERSES if args.warm_all else VERSES[:1]) for beam in (BEAMS if args.warm_all else (1,))]
        for body in warm:  # the baseline: models loaded, their exploration paths warmed (every verse and beam)
            assert call(port, "POST", "/api/explore", body)[0] == 200
        baseline = memory(server.pid)["VmRSS"]
        bodies = [{"model": names[i % len(names)], "sentence": VERSES[i % len(VERSES)],
                   "beam": BEAMS[(i // len(names)) % len(BEAMS)]} for i in range(args.explorations)]
        samples, ids, statuses = [], [None] * len(bodies), {}
        t0 = time.perf_counter()

        def explore(i: int) -> None:
            status, ex = call(port, "POST", "/api/explore", bodies[i])
            statuses[status] = statuses.get(status, 0) + 1
            ids[i] = (ex.get("id"), ex["maps"][0]["key"]) if status == 200 else None

        with ThreadPoolExecutor(args.clients) as pool:
            for start in range(0, len(bodies), 100):
                list(pool.map(explore, range(start, min(start + 100, len(bodies)))))
                samples.append({"explorations": min(start + 100, len(bodies)),
                                "rss_mib": round(memory(server.pid)["VmRSS"], 1)})
        seconds = time.perf_counter() - t0
        end = memory(server.pid)
        follow_up = [call(port, "GET", f"/api/explore/{eid}/weights?map={key}&layer=0")[0]
                     for eid, key in (ids[0], ids[-1])]  # the oldest (evicted: 410) and the newest (kept: 200)
        peak_rss = max(s["rss_mib"] for s in samples)
        result = {
            "benchmark": "explore_memory", "runs": args.runs, "explorations": args.explorations,
            "explore_memory_mib": args.explore_memory, "clients": args.clients, "answers": statuses,
            "warm_up_explorations": len(warm),
            "baseline_rss_mib": round(baseline, 1), "peak_rss_mib": round(peak_rss, 1),
            "end_rss_mib": round(end["VmRSS"], 1), "peak_hwm_mib": round(end["VmHWM"], 1),
            "growth_over_baseline_mib": round(peak_rss - baseline, 1),
            "within_budget": peak_rss - baseline <= args.explore_memory,
            "first_exploration_follow_up": follow_up[0], "last_exploration_follow_up": follow_up[1],
            "seconds": round(seconds, 1), "samples": samples, "machine": machine(), "commit": commit(),
            "command": "python benchmarks/explore_memory.py " + " ".join(sys.argv[1:]),
        }
        print(write_json(args.json, result))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
