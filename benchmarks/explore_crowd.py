#!/usr/bin/env python
"""A class at one explorer: many clients at once over several served models, each exploring an input and fetching
every follow-up the page fetches (each map's weights per layer, in pieces and in words, the neuron view of every
head, the step player's context per layer) or translating, against a real `attnlab serve`. Every answer must equal,
exactly, the one the same request gets alone (everything but the exploration id and the seconds); none may be a
5xx. Then the same for `attnlab.Run.explore` from threads of one process.

    python benchmarks/explore_crowd.py RUN_DIR [RUN_DIR ...] [--clients 200] [--requests 2] [--threads 8]
                                       [--json docs/results/issue36/explore_crowd.json]
    python benchmarks/explore_crowd.py --tiny runs/crowd ...   # first trains the test suite's two tiny runs
                                                               # (RNN + Bahdanau, Transformer) into runs/crowd

Clients are threads of this process (http.client, one connection per request), on the same cores as the server.
tests/test_server.py and tests/test_explore.py run the same functions with smaller counts.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_name, free_port, write_json  # noqa: E402

SENTENCES = ["the cat", "a red house sees the old dog", "the dog", "a cat sees a red cat and the house", "dog",
             "the old door opens", "a green window and a big house",
             "a red house sees the old dog and a green window sees the big cat"]  # 64 characters
UNSTABLE = ("id", "seconds")  # what differs between two answers to the same request


def call(port: int, method: str, path: str, body: dict | None = None, timeout: float = 120) -> tuple[int, dict]:
    """(status, JSON body) of one request on a new connection; status 0 if the connection failed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, None if body is None else json.dumps(body),
                     {"Content-Type": "application/json"} if body is not None else {})
        resp = conn.getresponse()
        data = resp.read()
        try:
            return resp.status, json.loads(data)
        except ValueError:
            return resp.status, {"raw": data.decode("utf-8", "replace")[:200]}
    except OSError as e:
        return 0, {"error": f"{type(e).__name__}: {e}"}
    finally:
        conn.close()


def explore_session(port: int, body: dict) -> dict:
    """POST /api/explore, then every follow-up fetch of the answer: {request: (status, answer)}, the exploration's
    id and time left out."""
    status, ex = call(port, "POST", "/api/explore", body)
    out = {"explore": (status, {k: v for k, v in ex.items() if k not in UNSTABLE})}
    if status != 200:
        return out
    base = f"/api/explore/{ex['id']}"
    for m in ex["maps"]:
        for layer in range(m["layers"]):
            for words in ("false", "true"):
                q = f"weights?map={m['key']}&layer={layer}&words={words}"
                out[q] = call(port, "GET", f"{base}/{q}")
            for head in range(m["heads"] if m["neuron"] else 0):
                q = f"neuron?map={m['key']}&layer={layer}&head={head}"
                out[q] = call(port, "GET", f"{base}/{q}")
    for layer in range(ex["steps"]["layers"] if ex.get("steps") else 0):
        out[f"steps?layer={layer}"] = call(port, "GET", f"{base}/steps?layer={layer}")
    return out


def translate_once(port: int, body: dict) -> dict:
    status, answer = call(port, "POST", "/api/translate", body)
    return {"translate": (status, {k: v for k, v in answer.items() if k not in UNSTABLE})}


def jobs_for(models: list[dict], n: int, seed: int = 0) -> list[tuple[str, dict]]:
    """n requests over the served models: explorations (with follow-ups) and translations, mixed."""
    rng, jobs = random.Random(seed), []
    for i in range(n):
        m = models[i % len(models)]
        body = {"model": m["name"], "sentence": rng.choice(SENTENCES)}
        kind = "explore" if m["kind"] != "translation" or rng.random() < 0.6 else "translate"
        if m["kind"] == "translation":  # beam 6 on a long sentence: the heavy lane's thread (server.LIGHT_COST)
            body["beam"] = 6 if body["sentence"] == SENTENCES[-1] else rng.choice([1, 2, 3])
        elif m["kind"] == "generation":
            body["max_new"] = 5
        else:
            body["sentence_b"] = rng.choice(SENTENCES)
        jobs.append((kind, body))
    return jobs


def run_job(port: int, job: tuple[str, dict]) -> dict:
    kind, body = job
    return explore_session(port, body) if kind == "explore" else translate_once(port, body)


def crowd(port: int, jobs: list[tuple[str, dict]], clients: int) -> dict:
    """Each distinct job alone, then all of them from `clients` threads at once: counts of requests, 5xx, other
    non-200s and answers that differ from the job's answer alone."""
    key = lambda job: json.dumps(job, sort_keys=True)  # noqa: E731
    alone = {key(j): run_job(port, j) for j in {key(j): j for j in jobs}.values()}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(lambda j: run_job(port, j), jobs))
    seconds = time.perf_counter() - t0
    requests = sum(len(a) for a in answers)
    statuses = [s for a in answers for s, _ in a.values()]
    differ = [(j, q) for j, a in zip(jobs, answers) for q, got in a.items() if got != alone[key(j)].get(q)]
    return {"clients": clients, "jobs": len(jobs), "explorations": sum(k == "explore" for k, _ in jobs),
            "requests": requests, "seconds": round(seconds, 2),
            "status_counts": {str(s): statuses.count(s) for s in sorted(set(statuses))},
            "server_errors": sum(s >= 500 or s == 0 for s in statuses),
            "other_non_200": sum(200 < s < 500 or 0 < s < 200 for s in statuses),
            "different_from_alone": len(differ), "first_differences": [f"{j[1]} {q}" for j, q in differ[:5]]}


def same_exploration(a, b) -> bool:
    """Exactly equal explorations (`attnlab.runs.views.Exploration`): every map's weights, queries and keys bit for bit,
    labels, n-best, choices and the steps."""
    import torch

    if (a.output, a.score, a.nbest, a.choices, list(a.maps)) != (b.output, b.score, b.nbest, b.choices, list(b.maps)):
        return False
    for x, y in zip(a.maps.values(), b.maps.values()):
        if (x.rows, x.cols, x.scale) != (y.rows, y.cols, y.scale) or not torch.equal(x.weights, y.weights):
            return False
        if any((p is None) != (q is None) or (p is not None and not torch.equal(p, q))
               for p, q in ((x.q, y.q), (x.k, y.k))):
            return False
    if (a.steps is None) != (b.steps is None):
        return False
    return a.steps is None or (torch.equal(a.steps.context, b.steps.context) and a.steps.tree == b.steps.tree
                               and a.steps.texts == b.steps.texts)


def run_threads(run, threads: int, per_thread: int, translators: int = 2) -> dict:
    """`Run.explore` of one loaded run from `threads` threads (per_thread inputs each) while `translators` more
    threads translate with it: explorations different from the same input's alone, errors, and translations that
    changed."""
    beam = 2 if run.family in ("rnn", "transformer") else None
    alone = {s: run.explore(s, beam=beam) for s in SENTENCES}
    inputs = [SENTENCES[i % len(SENTENCES)] for i in range(threads * per_thread)]
    errors: list[str] = []

    def explore(s: str):
        try:
            return run.explore(s, beam=beam)
        except Exception as e:  # counted, not raised: the count is the result
            errors.append(f"{type(e).__name__}: {e}")
            return None

    translating = run.family in ("rnn", "transformer")
    expected = {s: run.translate(s, beam=2) for s in SENTENCES} if translating else {}
    with ThreadPoolExecutor(threads + translators) as pool:
        side = [pool.submit(lambda: [(s, run.translate(s, beam=2)) for s in SENTENCES * 2])
                for _ in range(translators if translating else 0)]
        explored = list(pool.map(explore, inputs))
    changed = sum(got != expected[s] for f in side for s, got in f.result())
    return {"run": run.family, "threads": threads, "explorations": len(inputs), "errors": len(errors),
            "different_from_alone": sum(ex is not None and not same_exploration(ex, alone[s])
                                        for ex, s in zip(explored, inputs)),
            "translations_changed": changed, "first_errors": errors[:3]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--tiny", type=Path, help="train the test suite's tiny RNN and Transformer runs into this folder "
                                              "(if not there yet) and serve them")
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--requests", type=int, default=2, help="jobs per client")
    ap.add_argument("--threads", type=int, default=8, help="threads for Run.explore (0: skip)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.tiny:
        args.runs += tiny_runs(args.tiny)
    if not args.runs:
        ap.error("give run directories or --tiny DIR")
    port = free_port()
    log = tempfile.TemporaryFile()  # the server's log: a pipe nobody reads would fill and stop the server
    server = subprocess.Popen([str(Path(sys.executable).with_name("attnlab")), "serve", *map(str, args.runs), "--port",
                               str(port)],
                              stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        for _ in range(600):
            status, models = call(port, "GET", "/api/models", timeout=5)
            if status == 200:
                break
            if server.poll() is not None:
                log.seek(0)
                print(log.read().decode(errors="replace"), file=sys.stderr)
                return 1
            time.sleep(0.5)
        result = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "cores": os.cpu_count(),
                  "models": [m["name"] for m in models],
                  "server": crowd(port, jobs_for(models, args.clients * args.requests), args.clients)}
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
        log.seek(0)
        lines = log.read().decode(errors="replace").splitlines()
    result["server_log_lines"], result["server_log_tail"] = len(lines), lines[-5:]
    if args.threads:
        import attnlab  # loaded after the server ran, so the server had the cores to itself

        result["run_explore"] = [run_threads(attnlab.load(r), args.threads, 3) for r in args.runs]
    print(write_json(args.json, result))
    ok = result["server"]["server_errors"] == 0 and result["server"]["different_from_alone"] == 0 and all(
        r["errors"] == 0 and r["different_from_alone"] == 0 and r["translations_changed"] == 0
        for r in result.get("run_explore", []))
    return 0 if ok else 1


def tiny_runs(root: Path) -> list[Path]:
    """The test suite's synthetic task (tests/conftest.py: reversed word-for-word pairs, char tokens) and its two
    tiny runs, trained into root/rnn and root/transformer unless there already."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import make_pairs, tiny_experiment  # the suite's own data and configs, not a copy

    from attnlab.runs.workflow import train

    root.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train", 1500, 0), ("dev", 40, 1), ("test", 40, 2)):
        (root / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in make_pairs(n, seed)), encoding="utf-8")
    runs = [root / "rnn", root / "transformer"]
    for run in runs:
        if not (run / "checkpoints").is_dir():
            train(tiny_experiment(root, run.name), run)
    return runs


if __name__ == "__main__":
    sys.exit(main())
