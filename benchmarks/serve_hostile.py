#!/usr/bin/env python
"""`attnlab serve` under hostile connections on loopback: slow bodies, idle connections and a header flood at
once, while a normal client sends a translation request every 0.25 s (a fresh connection each). Records the normal
client's status codes and latencies before, during and after; the goal is a 200, or a JSON 503 with Retry-After,
within 1 s throughout. Bounded (stops by itself).

    python benchmarks/serve_hostile.py [RUN_DIR] [--json docs/results/issue36/serve_hostile.json]

Without RUN_DIR a tiny char-level GRU run is trained first (a few seconds). The attackers are processes of their
own (asyncio), each from its own loopback addresses (127.0.1.x idle, 127.0.2.x slow bodies, 127.0.3.x header
flood), the normal client 127.0.0.1, so the per-client limit is seen as a real server sees it. Each attacker
reopens a connection the server closed one second later: the pressure lasts the whole attack. Open files are
raised to the hard limit; idle connections are split over processes so that each stays under it.
`--server-src DIR` serves from another source tree (e.g. `git archive HEAD src | tar -x -C /tmp/before`) to
measure the code before a change; `--serve-args "..."` passes options to `attnlab serve`.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing as mp
import os
import random
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_json  # noqa: E402

SENTENCE, BEAM = "the cat", 2  # a light request: ~30 ms to decode alone on one core
FLOOD_HEAD = b"".join(b"X-Flood-%05d: %s\r\n" % (i, b"v" * 20) for i in range(9000))  # ~330 KiB, 9,000 headers


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def train_tiny_run(root: Path) -> Path:
    """A char-level GRU + Bahdanau attention on a word-reversal task, trained for 30 steps (seconds on a CPU)."""
    from attnlab.families.translation import experiment_from_dict
    from attnlab.runs.workflow import train

    rng = random.Random(0)
    words = ["the", "red", "house", "is", "big", "a", "cat", "my", "old", "door", "opens", "green", "window"]
    for name, n in (("train", 1500), ("dev", 40), ("test", 40)):
        lines = []
        for _ in range(n):
            s = [rng.choice(words) for _ in range(rng.randint(2, 7))]
            lines.append(f"{' '.join(s)}\t{' '.join(w[::-1] for w in reversed(s))}\n")
        (root / f"{name}.tsv").write_text("".join(lines), encoding="utf-8")
    exp = experiment_from_dict({
        "data": {"corpus": "files", "train": [str(root / "train.tsv")], "dev": [str(root / "dev.tsv")],
                 "test": [str(root / "test.tsv")]},
        "tokenizer": {"kind": "char"},
        "model": {"rnn": {"cell": "gru", "emb_dim": 32, "hidden_dim": 64, "attention": "bahdanau"}},
        "train": {"max_steps": 30, "max_tokens": 1200, "eval_every": 30, "seed": 3, "progress": False,
                  "keep_last": 1, "eval_max_sentences": 10},
        "decode": {"beam_size": 2, "max_src_tokens": 80}})
    train(exp, root / "tiny")
    return root / "tiny"


# ---------------------------------------------------------------------------------------------- attackers
def attacker(kind: str, port: int, ips: list[str], n: int, seconds: float, results, reconnect: bool) -> None:
    """One process: n concurrent connections of `kind` (idle, slow, flood) for `seconds`; counts into results.
    An idle or slow connection the server closed is opened again a second later with `reconnect` (a connection
    flood), else that slot stays closed (the connections are held as long as the server keeps them)."""
    raise_fd_limit()
    counts: dict[str, int] = {}

    def count(key: str) -> None:
        counts[key] = counts.get(key, 0) + 1

    def status_of(data: bytes) -> str:
        return data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else ("closed" if not data else "?")

    async def one(i: int, deadline: float) -> None:
        ip = ips[i % len(ips)]
        loop = asyncio.get_running_loop()
        await asyncio.sleep(random.random() * (1.0 if kind == "idle" else 2.0))  # a burst, not one instant
        while loop.time() < deadline:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(ip, 0))
            except OSError as e:
                count(f"connect_error_{e.errno}")
                await asyncio.sleep(1.0)
                continue
            count("opened")
            try:
                if kind == "idle":  # sends nothing: waits for the server to answer or close
                    count(status_of(await reader.read(4096)))
                elif kind == "slow":  # a POST whose 1000-byte body arrives a byte a second
                    writer.write(b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 1000\r\n\r\n{")
                    answer = asyncio.ensure_future(reader.read(4096))
                    answer.add_done_callback(lambda f: f.cancelled() or f.exception())  # read below, or dropped
                    while not answer.done():
                        await asyncio.wait([answer], timeout=1.0)
                        if not answer.done():
                            writer.write(b" ")
                    count(status_of(answer.result()))
                else:  # flood: a request head of 9,000 headers, as fast as the server answers
                    writer.write(b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                 + FLOOD_HEAD + b"Content-Length: 2\r\n\r\n{}")
                    count(status_of(await reader.read(4096)))
            except (OSError, asyncio.IncompleteReadError) as e:
                count(f"error_{type(e).__name__}")
            finally:
                writer.close()
            if kind != "flood" and not reconnect:
                return
            await asyncio.sleep(1.0 if kind != "flood" else 0.0)

    async def main() -> None:
        deadline = asyncio.get_running_loop().time() + seconds
        tasks = [asyncio.ensure_future(one(i, deadline)) for i in range(n)]
        await asyncio.wait(tasks, timeout=seconds + 5)
        for t in tasks:
            t.cancel()

    asyncio.run(main())
    results.put((kind, counts))


# ---------------------------------------------------------------------------------------------- normal client
def normal_request(port: int, model: str) -> dict:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=("127.0.0.1", 0))
    try:
        conn.request("POST", "/api/translate", json.dumps({"model": model, "sentence": SENTENCE, "beam": BEAM}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        out = {"status": resp.status, "seconds": time.perf_counter() - t0}
        if resp.status != 200:
            try:
                out["error"] = json.loads(body)["error"]
            except (ValueError, KeyError, TypeError):
                out["error"] = f"not JSON: {body[:80]!r}"
            out["retry_after"] = resp.getheader("Retry-After")
        return out
    except OSError as e:
        return {"status": 0, "seconds": time.perf_counter() - t0, "error": f"{type(e).__name__}: {e}"}
    finally:
        conn.close()


def normal_client(port: int, model: str, seconds: float, every: float = 0.25) -> list[dict]:
    """A request every `every` seconds (each in its own thread, so a slow one does not delay the next)."""
    got: list[dict] = []
    threads = []
    t_start = time.monotonic()
    while time.monotonic() - t_start < seconds:
        def go(at=time.monotonic() - t_start):
            got.append({"t": round(at, 2), **normal_request(port, model)})
        threads.append(threading.Thread(target=go))
        threads[-1].start()
        time.sleep(every)
    for t in threads:
        t.join()
    return sorted(got, key=lambda r: r["t"])


def summary(requests: list[dict]) -> dict:
    good = [r for r in requests if (r["status"] == 200 or (r["status"] == 503 and r.get("retry_after")
                                                            and not r["error"].startswith("not JSON")))
            and r["seconds"] <= 1.0]
    lat = sorted(r["seconds"] for r in requests)
    statuses: dict[str, int] = {}
    for r in requests:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
    return {"requests": len(requests), "statuses": statuses, "goal_met": len(good),
            "goal_met_fraction": round(len(good) / max(len(requests), 1), 4),
            "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
            "p95_ms": round(1000 * lat[int(0.95 * (len(lat) - 1))], 1) if lat else None,
            "max_ms": round(1000 * lat[-1], 1) if lat else None,
            "failures": [r for r in requests if r not in good][:20]}


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, nargs="?")
    ap.add_argument("--port", type=int, default=8766)
    ap.add_argument("--front-port", type=int,
                    help="send every client (normal and attackers) to this port instead: a reverse proxy already "
                         "running in front of --port (benchmarks/nginx_front.sh)")
    ap.add_argument("--idle", type=int, default=20000, help="idle connections held (default 20000)")
    ap.add_argument("--idle-ips", type=int, default=40, help="addresses the idle connections come from")
    ap.add_argument("--slow", type=int, default=4400, help="slow-body connections (default 4400)")
    ap.add_argument("--slow-ips", type=int, default=40)
    ap.add_argument("--flood", type=int, default=8, help="clients sending 9,000-header requests without pause")
    ap.add_argument("--seconds", type=float, default=40, help="length of the attack")
    ap.add_argument("--reconnect", action="store_true",
                    help="reopen each idle or slow connection the server closed, a second later (a connection flood)")
    ap.add_argument("--calm", type=float, default=8, help="seconds of normal requests before and after")
    ap.add_argument("--server-src", type=Path, help="serve from this source tree (PYTHONPATH) instead")
    ap.add_argument("--serve-args", default="", help="more options for attnlab serve")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the server (OMP_NUM_THREADS; default 1: the machine is shared)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    target = args.front_port or args.port  # where clients connect
    limit = raise_fd_limit()
    per_process = max(1000, limit - 200)
    tmp = Path(tempfile.mkdtemp(prefix="serve_hostile_"))
    run_dir = args.run_dir or train_tiny_run(tmp)
    model = run_dir.name
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if args.server_src:
        env["PYTHONPATH"] = str(args.server_src)
    log_path = tmp / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen([sys.executable, "-m", "attnlab.app.cli", "serve", str(run_dir), "--port",
                                   str(args.port), *shlex.split(args.serve_args)], stdout=log, stderr=log, env=env)
    out: dict = {"run": str(run_dir), "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg(),
                 "fd_hard_limit": limit, "server_threads": args.threads, "request": {"sentence": SENTENCE, "beam": BEAM},
                 "server_src": str(args.server_src or "this checkout"), "serve_args": args.serve_args,
                 "front_port": args.front_port,
                 "attack": {"reconnect": args.reconnect, "idle": args.idle, "idle_ips": args.idle_ips, "slow": args.slow, "slow_ips": args.slow_ips,
                            "flood_clients": args.flood, "seconds": args.seconds}}
    try:
        deadline = time.time() + 120
        while normal_request(target, model)["status"] != 200:
            if time.time() > deadline or server.poll() is not None:
                raise SystemExit(f"server did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        out["before"] = summary(normal_client(target, model, args.calm))
        print("before", {k: v for k, v in out["before"].items() if k != "failures"}, flush=True)

        results: mp.Queue = mp.Queue()
        procs = []
        idle_ips = [f"127.0.1.{1 + i}" for i in range(args.idle_ips)]
        for start in range(0, args.idle, per_process // 2):  # two or more processes: each under the fd limit
            n = min(per_process // 2, args.idle - start)
            procs.append(mp.Process(target=attacker, args=("idle", target, idle_ips, n, args.seconds, results,
                                                           args.reconnect)))
        procs.append(mp.Process(target=attacker, args=("slow", target, [f"127.0.2.{1 + i}" for i in
                                                                            range(args.slow_ips)], args.slow,
                                                        args.seconds, results, args.reconnect)))
        procs.append(mp.Process(target=attacker, args=("flood", target, ["127.0.3.1"], args.flood, args.seconds,
                                                        results, True)))
        for p in procs:
            p.start()
        server_fds = []
        sampler_stop = threading.Event()

        def sample() -> None:
            while not sampler_stop.wait(1.0):
                server_fds.append(open_fds(server.pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        time.sleep(1.0)  # the attackers' first burst is under way
        during = normal_client(target, model, args.seconds - 2)
        out["during"] = summary(during)
        out["during_timeline"] = [(r["t"], r["status"], round(r["seconds"], 3)) for r in during]
        print("during", {k: v for k, v in out["during"].items() if k != "failures"}, flush=True)
        attacks: dict = {}
        for _ in procs:
            kind, counts = results.get(timeout=args.seconds + 120)
            for key, value in counts.items():
                attacks.setdefault(kind, {})[key] = attacks.setdefault(kind, {}).get(key, 0) + value
        for p in procs:
            p.join(timeout=60)
        sampler_stop.set()
        sampler.join()
        out["attackers"] = attacks
        out["server_open_fds"] = {"max": max(server_fds, default=-1), "samples": server_fds}
        print("attackers", attacks, flush=True)
        out["after"] = summary(normal_client(target, model, args.calm))
        print("after", {k: v for k, v in out["after"].items() if k != "failures"}, flush=True)
        out["server_rss_kb"] = rss_kb(server.pid)
        out["load_average_at_end"] = os.getloadavg()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            out["exit_after_sigterm"] = server.wait(timeout=90)
        except subprocess.TimeoutExpired:
            server.kill()
            out["exit_after_sigterm"] = "killed after 90 s"
    out["log_bytes"] = log_path.stat().st_size
    out["log_tail"] = log_path.read_text(errors="replace")[-1500:]
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
