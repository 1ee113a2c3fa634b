"""The bad-input suite of issue 19: `attnlab` command lines a user could type (numbers past every limit, devices
this torch lacks, formats matplotlib cannot write, files in the way, configs that are not UTF-8) and run
directories damaged on purpose (tokenizer folder replaced by a file or gone, empty or foreign SentencePiece models,
weights in float8/int8/float64/...), each run as its own `attnlab` process. Each case ends as one of: ok (exit 0),
error (exit 2, one error line), internal (exit 1, the last-resort line), traceback (a Python traceback on stderr),
other (another exit status, e.g. killed), timeout.

    python scripts/bad_inputs.py --work /tmp/bad_inputs --json docs/results/issue19_bad_inputs.json
    python scripts/bad_inputs.py --work /tmp/bad_inputs --src /tmp/old/src   # the CLI of another checkout

The tiny runs it damages are trained once under --work by the code of this checkout (the run directory format is
the same for --src). Every process gets a 6 GB address-space limit (an allocation past it fails at once instead of
swapping) and one torch thread.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = {"the": "la", "house": "casa", "is": "es", "big": "grande", "small": "pequeña", "red": "roja", "a": "una",
         "cat": "gata", "sees": "ve", "and": "y", "old": "vieja", "my": "mi", "door": "puerta"}


# ---------------------------------------------------------------------------------------------- the tiny runs
def _pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(sorted(WORDS)) for _ in range(rng.randint(2, 6))]
        out.append((" ".join(words), " ".join(WORDS[w] for w in reversed(words))))
    return out


def make_runs(work: Path) -> dict[str, Path]:
    """Four tiny trained runs (RNN, Transformer, LM with a char tokenizer; an RNN with a unigram tokenizer)."""
    import torch

    from attnlab.families.translation import experiment_from_dict
    from attnlab.families.lm import load_lm_config
    from attnlab.runs.workflow import train

    torch.set_num_threads(1)
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train", 600, 0), ("dev", 20, 1), ("test", 20, 2)):
        (data / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in _pairs(n, seed)), encoding="utf-8")
    (data / "text.txt").write_text("".join(s + "\n" for s, _ in _pairs(300, 5)), encoding="utf-8")
    files = {"corpus": "files", "train": [str(data / "train.tsv")], "dev": [str(data / "dev.tsv")],
             "test": [str(data / "test.tsv")]}
    train_cfg = {"max_steps": 10, "max_tokens": 800, "eval_every": 10, "progress": False, "keep_last": 1,
                 "eval_max_sentences": 5}
    models = {"rnn": {"rnn": {"emb_dim": 16, "hidden_dim": 32}},
              "transformer": {"family": "transformer", "transformer": {"d_model": 32, "h": 2, "d_ff": 64,
                                                                       "enc_layers": 1, "dec_layers": 1}}}
    runs = {}
    for name, model, tokenizer in (("rnn", models["rnn"], {"kind": "char"}),
                                   ("transformer", models["transformer"], {"kind": "char"}),
                                   ("spm", models["rnn"], {"kind": "unigram", "vocab_size": 300})):
        runs[name] = work / "runs" / name
        if not (runs[name] / "checkpoints" / "latest.json").is_file():
            train(experiment_from_dict({"data": files, "tokenizer": tokenizer, "model": model, "train": train_cfg}),
                  runs[name])
    runs["lm"] = work / "runs" / "lm"
    if not (runs["lm"] / "checkpoints" / "latest.json").is_file():
        train(load_lm_config(None, ["data.corpus=text", f"data.train={data / 'text.txt'}", "data.dev_size=20",
                                    "data.test_size=20", "tokenizer.kind=char", "model.lm.d_model=32", "model.lm.h=2",
                                    "model.lm.d_ff=64", "model.lm.layers=1", "model.lm.max_len=128",
                                    *[f"train.{k}={str(v).lower()}" for k, v in train_cfg.items()]]), runs["lm"])
    for run in runs.values():  # what an earlier invocation's cases wrote there (evaluate)
        shutil.rmtree(run / "eval", ignore_errors=True)
    return runs


# ---------------------------------------------------------------------------------------------- damage
def _stem(run: Path) -> str:
    return json.loads((run / "checkpoints" / "latest.json").read_text())["name"]


def _retype(dtype: str):
    def damage(run: Path) -> None:
        import torch
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file

        path = run / "checkpoints" / f"{_stem(run)}.safetensors"
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
        save_file({k: v.to(getattr(torch, dtype)) for k, v in load_file(str(path)).items()}, str(path), metadata=meta)
    return damage


def _replace(relative: str, by: str):
    def damage(run: Path) -> None:
        path = run / relative
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        if by == "file":
            path.write_text("x")
        elif by == "folder":
            path.mkdir()
    return damage


def _write(relative: str, content: bytes):
    return lambda run: (run / relative).write_bytes(content)


DAMAGES = {  # name: (run it is made from, damage)
    "tokenizer folder is a file": ("rnn", _replace("tokenizer", "file")),
    "tokenizer folder is gone": ("rnn", _replace("tokenizer", "gone")),
    "LM tokenizer folder is gone": ("lm", _replace("tokenizer", "gone")),
    "empty SentencePiece model": ("spm", _write("tokenizer/src.model", b"")),
    "foreign SentencePiece model": ("spm", _write("tokenizer/src.model", b"\x0a\x05hello" * 10)),
    "SentencePiece model is a folder": ("spm", _replace("tokenizer/src.model", "folder")),
    "char vocabulary is a folder": ("rnn", _replace("tokenizer/src.chars.json", "folder")),
    "char vocabulary not UTF-8": ("rnn", _write("tokenizer/src.chars.json", b"\xff\xfe")),
    "tokenizer.json is a folder": ("rnn", _replace("tokenizer/tokenizer.json", "folder")),
    "config.json is a folder": ("rnn", _replace("config.json", "folder")),
    "checkpoints is a file": ("rnn", _replace("checkpoints", "file")),
    "metrics.jsonl damaged": ("rnn", _write("metrics.jsonl", b'{"step": "x"}\n{"step": 1}\n')),
    **{f"weights in {d}": ("rnn", _retype(d)) for d in ("float8_e4m3fn", "float8_e5m2", "int8", "uint8", "int64",
                                                         "bool", "float64", "float16", "bfloat16")},
    **{f"Transformer weights in {d}": ("transformer", _retype(d)) for d in ("float8_e4m3fn", "float64")},
}


# ---------------------------------------------------------------------------------------------- cases
def cases(work: Path, runs: dict[str, Path]) -> list[list[str]]:
    r, t, lm = runs["rnn"], runs["transformer"], runs["lm"]
    inp = work / "in.txt"
    inp.write_text("the cat\n")
    afile = work / "afile"
    afile.write_text("x")
    (work / "bad.toml").write_bytes(b"[train]\nmax_steps = 5 # \xff\xfe\n")
    (work / "bad.yaml").write_bytes(b"train:\n  lr: \xe9\n")
    (work / "big.json").write_text('{"train": {"seed": ' + "9" * 5000 + "}}")
    rnn_cfg, tr_cfg, lm_cfg = (str(ROOT / "configs" / n) for n in ("bible-rnn-bahdanau.toml",
                                                                    "bible-transformer-small.toml",
                                                                    "bible-lm-es.toml"))
    tiny = ["--set", "data.corpus=files", "--set", f"data.train=[{work / 'data' / 'train.tsv'}]", "--set",
            "tokenizer.kind=char", "--set", "model.rnn.hidden_dim=16", "--set", "model.rnn.emb_dim=8", "--set",
            "train.max_steps=1", "--set", "train.progress=false", "--set", "data.dev_size=10", "--set",
            "data.test_size=10"]
    c: list[list[str]] = []

    def a(*argv) -> None:
        c.append([str(x) for x in argv])

    for n in (0, -1, 10**9, 2**63, 10**30):
        a("translate", r, inp, "--beam", n)
        a("translate", r, inp, "--n-best", n)
    a("translate", t, inp, "--beam", 10**6)
    for device in ("cuda", "mps"):
        a("translate", r, inp, "--device", device)
        a("evaluate", r, "--device", device)
    a("report", r, "--device", "cuda", "--out", work / "r.html")
    a("serve", r, "--device", "mps", "--port", "0")
    for device in ("cuda:7", "cuda", "mps", "xpu"):
        a("train", rnn_cfg, "--out", work / "o_device", *tiny, "--set", f"train.device={device}")
    for key in ("model.rnn.hidden_dim", "model.rnn.emb_dim", "model.rnn.enc_layers", "model.rnn.attn_dim",
                "decode.beam_size", "decode.max_len_ratio", "decode.max_len_offset", "decode.batch_size",
                "decode.max_src_tokens", "train.seed", "train.num_threads", "train.max_tokens", "train.max_steps",
                "tokenizer.vocab_size", "summary.src_vocab", "train.pack_length", "train.keep_last", "data.dev_size",
                "train.accum_steps", "train.eval_every", "train.warmup_steps"):
        for v in (10**12, -5, "1e308", 2**63):
            a("summary", rnn_cfg, "--set", f"{key}={v}")
    for key in ("model.transformer.d_model", "model.transformer.d_ff", "model.transformer.max_len",
                "model.transformer.h", "model.transformer.enc_layers"):
        for v in (10**12, 65536, -1):
            a("summary", tr_cfg, "--set", f"{key}={v}")
    for key in ("model.lm.d_model", "model.lm.max_len", "generate.max_len", "generate.top_k"):
        for v in (10**12, -1):
            a("summary", lm_cfg, "--set", f"{key}={v}")
    for v in (10**9, -1, 2**63):
        a("summary", rnn_cfg, "--src-len", v)
        a("summary", r, "--tgt-len", v)
    a("summary", t, "--src-len", 4000)
    for seed in (2**63, -1, 2**32, 10**30):
        a("train", rnn_cfg, "--out", work / "o_seed", *tiny, "--set", f"train.seed={seed}")
    for threads in (10**6, 2**31, 2**63):
        a("train", rnn_cfg, "--out", work / "o_threads", *tiny, "--set", f"train.num_threads={threads}")
    a("train", rnn_cfg, "--out", work / "o_ratio", *tiny, "--set", "decode.max_len_ratio=1e300")
    a("train", rnn_cfg, "--out", afile, *tiny)
    for bad in ("bad.toml", "bad.yaml", "big.json"):
        a("summary", work / bad)
    a("train", work / "bad.toml")
    a("summary", rnn_cfg, "--set", "train.seed=" + "9" * 5000)
    for n in (10**9, -1, 2**63):
        for option in ("--max-len", "--num", "--seed", "--top-k"):
            a("generate", lm, option, n)
    for option, v in (("--temperature", "1e308"), ("--temperature", "nan"), ("--temperature", "1e-94"),
                      ("--top-p", "inf"), ("--temperature", "-1")):
        a("generate", lm, option, v)
    for formats in ("xyz", "png,", "", "pdf,foo", "jpg", "pgf"):
        a("plot", "attention", r, "--sentence", "the cat", "--formats", formats, "--out", work / "plot")
    a("plot", "curves", r, "--out", work / "x.xyz")
    a("plot", "curves", r, "--out", work / "x")
    a("plot", "curves", r, "--out", work)
    a("plot", "bleu-by-length", r, "--out", work / "x.png")
    for out in (afile / "sub", "", ".", "/", ".."):
        a("plot", "attention", r, "--sentence", "the cat", "--out", out)
    a("plot", "attention", r, "--sentence", "the cat", "--beam", 10**9)
    for option, v in (("--formats", "xyz"), ("--beam", 10**9), ("--layer", 10**9), ("--query", 10**9),
                      ("--head", 10**9)):
        a("plot", "explore", t, "--sentence", "the cat", option, v, "--out", work / "explore")
    for v in (10**9, -1):
        a("plot", "explore", lm, "--sentence", "the", "--max-new", v, "--out", work / "explore")
    a("translate", r, inp, "-o", work)
    a("translate", r, inp, "-o", afile / "x")
    a("translate", r, work)
    a("evaluate", r, "--beam", 10**9)
    a("evaluate", r, "--max-sentences", -1)
    a("report", r, "--out", work, "--samples", 1)
    a("report", r, "--out", work / "r.html", "--samples", 10**9)
    a("report", r, "--out", work / "r.html", "--beam", 10**9)
    a("report", r, "--out", afile / "r.html")
    a("series", "fib", "--seeds", 10**9, "--out", work / "series")
    for key, v in (("series.length", 10**12), ("model.hidden_dim", 10**12), ("train.num_threads", 10**6),
                   ("series.window", 10**8), ("series.noise", -1)):
        a("series", "sine", "--seeds", 1, "--set", f"{key}={v}", "--out", work / "series")
    a("series", "fib", "--seeds", 1, "--set", "train.max_epochs=1", "--out", afile)
    a("serve", r, "--port", 10**9)
    a("serve", r, "--max-chars", 10**30)
    a("serve", r, "--timeout", "1e308")
    a("serve", r, "--max-connections", 10**30)
    tsv = work / "data" / "train.tsv"
    a("data", "tsv", tsv, "--vocab-size", 10**12, "--tokenizer", "bpe")
    a("data", "tsv", tsv, "--vocab-size", -1)
    a("data", "tsv", tsv, "--dev-size", 10**12, "--tokenizer", "char")
    a("data", "tsv", tsv, "--tokenizer", "char", "--save-tokenizer", afile)
    a("export", t, "--out", afile)
    for name, (base, damage) in DAMAGES.items():
        run = work / "damaged" / name.replace(" ", "_")
        shutil.rmtree(run, ignore_errors=True)  # fresh: a resume of an earlier invocation changed it
        shutil.copytree(runs[base], run)
        damage(run)
        if base == "lm":
            a("generate", run)
            a("summary", run)
        else:
            a("translate", run, inp, "-o", work / "out.txt")
            a("summary", run)
            a("evaluate", run, "--max-sentences", 2)
            a("plot", "curves", run, "--out", work / "curves.png")
        a("train", "--resume", run, "--set", f"train.max_steps={12 if base != 'lm' else 12}")
    return c


# ---------------------------------------------------------------------------------------------- running
def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))


def _shown(argv: list[str]) -> list[str]:
    """The command line as reported: an argument of thousands of digits shortened."""
    return [a if len(a) <= 100 else f"{a[:20]}...({len(a)} characters)" for a in argv]


def run_case(argv: list[str], src: Path, work: Path, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "ATTNLAB_CACHE": str(work / "cache")}
    env.pop("ATTNLAB_RAISE_INTERNAL", None)  # what a user sees
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", "import sys; from attnlab.app.cli import main; sys.exit(main())",
                               *argv], capture_output=True, text=True, timeout=timeout, env=env, cwd=work,
                              stdin=subprocess.DEVNULL, preexec_fn=_limit)
    except subprocess.TimeoutExpired:
        return {"argv": _shown(argv), "outcome": "timeout", "seconds": timeout, "last_line": ""}
    err = done.stderr.strip().splitlines()
    errors = [line for line in err if "error:" in line]
    if "Traceback (most recent call last)" in done.stderr:
        outcome = "traceback"
    elif done.returncode == 0:
        outcome = "ok"
    elif done.returncode == 2 and len(errors) == 1:
        outcome = "error"
    elif done.returncode == 1 and len(errors) == 1 and "internal error" in errors[0]:
        outcome = "internal"
    else:
        outcome = "other"
    return {"argv": _shown(argv), "outcome": outcome, "code": done.returncode,
            "seconds": round(time.perf_counter() - t0, 1), "last_line": err[-1][:300] if err else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="scratch folder (the tiny runs are kept there)")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the attnlab sources to run (default: these)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case (serve runs until it)")
    parser.add_argument("--json", type=Path, help="write the summary and every case here")
    args = parser.parse_args()
    args.work = args.work.resolve()
    runs = make_runs(args.work)
    all_cases = cases(args.work, runs)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda argv: run_case(argv, args.src.resolve(), args.work, args.timeout), all_cases))
    counts: dict[str, int] = {}
    for res in results:
        counts[res["outcome"]] = counts.get(res["outcome"], 0) + 1
        if res["outcome"] in ("traceback", "internal", "other"):
            print(f"{res['outcome']}: attnlab {' '.join(res['argv'])}\n    {res['last_line']}", flush=True)
    summary = {"src": str(args.src), "cases": len(results), **counts, "seconds": round(time.perf_counter() - t0)}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "cases": results}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
