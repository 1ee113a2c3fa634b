#!/usr/bin/env python
"""Issue 47's hostile round, rerun: model folders from elsewhere (Hugging Face MarianMT, BioGPT/GPT-2 and BERT
folders, compact int8 runs, run folders with corrupt files, `--init` runs, a killed export's staging folder),
each damaged one way and handed to the `attnlab` command that reads it, in its own process with a 4 GiB
address-space limit. A case passes when the command refuses it the way a user mistake is refused: exit 2, one
`attnlab: error:` line, no traceback, no run folder left behind, and the damage named. A case that exits 0 is a
wrong result. The peak RSS of each process (os.wait4) is recorded, and the worst refusal's is reported.

    python benchmarks/hostile_folders.py --work /tmp/hostile --json docs/results/issue47/hostile.json

The folders come from attnlab's own exports of tiny runs trained here (a post-norm Transformer exports as
MarianMT, the LM as BioGptForCausalLM) and a tiny transformers BertModel with a vocab.txt. Every process uses one
torch thread.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 4 * 2**30


def attnlab(*argv: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnlab", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------------------- the sources
def make_sources(work: Path, env: dict) -> dict[str, Path]:
    """Tiny trained runs and the folders exported from them: {"run", "marian", "lm", "biogpt", "bert", "compact"}."""
    import torch
    import transformers

    from attnlab.runs.workflow import train
    from attnlab.families.lm import load_lm_config
    from attnlab.families.translation import experiment_from_dict

    torch.set_num_threads(1)
    spec = importlib_bad_inputs()
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train", 600, 0), ("dev", 20, 1), ("test", 20, 2)):
        (data / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in spec._pairs(n, seed)), encoding="utf-8")
    (data / "text.txt").write_text("".join(s + "\n" for s, _ in spec._pairs(300, 5)), encoding="utf-8")
    files = {"corpus": "files", "train": [str(data / "train.tsv")], "dev": [str(data / "dev.tsv")],
             "test": [str(data / "test.tsv")]}
    train_cfg = {"max_steps": 10, "max_tokens": 800, "eval_every": 10, "progress": False, "keep_last": 1,
                 "eval_max_sentences": 5}
    src = {"run": work / "runs" / "post", "lm": work / "runs" / "lm"}
    if not (src["run"] / "checkpoints" / "latest.json").is_file():
        train(experiment_from_dict({"data": files, "tokenizer": {"kind": "unigram", "vocab_size": 300, "joint": True}, "train": train_cfg,
                                    "model": {"family": "transformer", "transformer": {
                                        "d_model": 32, "h": 2, "d_ff": 64, "enc_layers": 2, "dec_layers": 2,
                                        "norm": "post", "tie_embeddings": "all"}}}), src["run"])
    if not (src["lm"] / "checkpoints" / "latest.json").is_file():
        train(load_lm_config(None, ["data.corpus=text", f"data.train={data / 'text.txt'}", "data.dev_size=20",
                                    "data.test_size=20", "tokenizer.kind=unigram", "tokenizer.vocab_size=300",
                                    "model.lm.d_model=32", "model.lm.h=2", "model.lm.d_ff=64", "model.lm.layers=2",
                                    "model.lm.max_len=128",
                                    *[f"train.{k}={str(v).lower()}" for k, v in train_cfg.items()]]), src["lm"])
    for name, run in (("marian", src["run"]), ("biogpt", src["lm"])):
        src[name] = work / "hf" / name
        if not src[name].is_dir():
            done = attnlab("export", str(run), "--to", "huggingface", "--out", str(src[name]), env=env, cwd=work)
            assert done.returncode == 0, done.stderr
    src["compact"] = work / "compact"
    if not src["compact"].is_dir():
        done = attnlab("export", str(src["run"]), "--to", "attnlab", "--quantization", "int8", "--out",
                       str(src["compact"]), env=env, cwd=work)
        assert done.returncode == 0, done.stderr
    src["bert"] = work / "hf" / "bert"
    if not src["bert"].is_dir():
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted({w for s, _ in spec._pairs(300, 5)
                                                                         for w in s.split()})
        cfg = transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
        transformers.BertModel(cfg).save_pretrained(str(src["bert"]))
        (src["bert"] / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return src


def importlib_bad_inputs():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bad_inputs", ROOT / "scripts" / "bad_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------- damage
def set_json(relative: str, **changes):
    def edit(d: Path) -> None:
        path = d / relative
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return edit


def write(relative: str, content: bytes):
    def edit(d: Path) -> None:
        (d / relative).parent.mkdir(parents=True, exist_ok=True)
        (d / relative).write_bytes(content)
    return edit


def retype(relative: str, how: str):
    """The weights file's tensors as another dtype ("int32", "bool", "complex64"), NaN or inf, or float32 bytes
    whose header says I32 ("relabel")."""
    def edit(d: Path) -> None:
        import torch
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file
        path = d / relative
        if how == "relabel":
            raw = path.read_bytes()
            n = int.from_bytes(raw[:8], "little")
            head = raw[8:8 + n].replace(b'"F32"', b'"I32"')
            path.write_bytes(len(head).to_bytes(8, "little") + head + raw[8 + n:])
            return
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
        out = {}
        for k, v in load_file(str(path)).items():
            if how in ("nan", "inf") and v.is_floating_point():
                v = v.clone()
                v.view(-1)[0] = float(how)
            elif how not in ("nan", "inf") and v.is_floating_point():
                v = v.to(getattr(torch, how))
            out[k] = v.contiguous()
        save_file(out, str(path), metadata=meta)
    return edit


def million_empty_tensors(relative: str):
    def edit(d: Path) -> None:
        head = json.dumps({f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
                           for i in range(1_000_000)}).encode()
        (d / relative).write_bytes(len(head).to_bytes(8, "little") + head)
    return edit


def int8_scale(value: float):
    def edit(d: Path) -> None:
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file
        path = next((d / "checkpoints").glob("step_*.safetensors"))
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
        tensors = load_file(str(path))
        name = next(k for k in tensors if k.endswith(".int8_scale"))
        tensors[name] = tensors[name].clone()
        tensors[name][0] = value
        save_file(tensors, str(path), metadata=meta)
    return edit


def metrics_line(line: str):
    def edit(d: Path) -> None:
        with open(d / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(line + "\n")
    return edit


def evaluation(**changes):
    def edit(d: Path) -> None:
        (d / "eval").mkdir(exist_ok=True)
        base = {"split": "test", "bleu": 1.0, "chrf": 2.0, "sentences": 20, "by_length": []}
        (d / "eval" / "test.json").write_text(json.dumps({**base, **changes}))
    return edit


def drop_tokenizer_section(d: Path) -> None:
    raw = json.loads((d / "config.json").read_text())
    del raw["tokenizer"]
    (d / "config.json").write_text(json.dumps(raw))


DEEP = b"[" * 200_000 + b"]" * 200_000


def cases(src: dict[str, Path]) -> list[tuple[str, str, object, list[str], str]]:
    """(family, name, source key, damage, command after the folder's path, what the one line must name)."""
    imp, exp = ["import"], ["export"]
    return [
        # deeply nested JSON
        ("deep JSON", "marian config.json", "marian", write("config.json", DEEP), imp, "nested too deeply"),
        ("deep JSON", "marian vocab.json", "marian", write("vocab.json", DEEP), imp, "nested too deeply"),
        ("deep JSON", "bert config.json", "bert", write("config.json", DEEP), imp, "nested too deeply"),
        ("deep JSON", "bert tokenizer_config.json", "bert", write("tokenizer_config.json", DEEP), imp, "tokenizer_config"),
        ("deep JSON", "run metrics.jsonl, export", "run", metrics_line("[" * 50_000 + "]" * 50_000),
         [*exp, "--to", "attnlab"], "metrics.jsonl"),
        ("deep JSON", "run eval/test.json, export", "run", write("eval/test.json", DEEP), [*exp, "--to", "attnlab"],
         "nested too deeply"),
        # config.json typed and bounded
        ("config types", "d_model -1", "marian", set_json("config.json", d_model=-1), imp, "d_model is -1"),
        ("config types", "d_model 0", "marian", set_json("config.json", d_model=0), imp, "d_model is 0"),
        ("config types", 'd_model "16"', "marian", set_json("config.json", d_model="32"), imp, 'd_model is "32"'),
        ("config types", "d_model 16.0", "marian", set_json("config.json", d_model=32.0), imp, "d_model is 32.0"),
        ("config types", 'encoder_layers "2"', "marian", set_json("config.json", encoder_layers="2"), imp,
         'encoder_layers is "2"'),
        ("config types", "activation a list", "marian", set_json("config.json", activation_function=["relu"]), imp,
         "activation_function is"),
        ("config types", "biogpt hidden_act a dict", "biogpt", set_json("config.json", hidden_act={"a": 1}), imp,
         "hidden_act is"),
        ("config types", "bert hidden_act a list", "bert", set_json("config.json", hidden_act=["gelu"]), imp,
         "hidden_act is"),
        # gigabytes before a refusal
        ("gigabytes", "marian d_model 1e9", "marian", set_json("config.json", d_model=10**9), imp, "d_model is"),
        ("gigabytes", "bert 1e6 layers", "bert", set_json("config.json", num_hidden_layers=10**6), imp,
         "num_hidden_layers is"),
        ("gigabytes", "bert 1e7 layers", "bert", set_json("config.json", num_hidden_layers=10**7), imp,
         "num_hidden_layers is"),
        ("gigabytes", "a million empty tensors", "marian", million_empty_tensors("model.safetensors"), imp,
         "a header of"),
        # tokenizer files
        ("tokenizer", "biogpt tokenizer.json not UTF-8", "biogpt", write("tokenizer.json", b'{"a": "\xff\xfe"}'), imp,
         "not UTF-8"),
        ("tokenizer", "bert tokenizer_config.json []", "bert", write("tokenizer_config.json", b"[]"), imp,
         "expected a JSON object"),
        # inconsistent weights
        ("weights", "F32 relabelled I32", "marian", retype("model.safetensors", "relabel"), imp, "torch.int32"),
        ("weights", "int32", "marian", retype("model.safetensors", "int32"), imp, "torch.int32"),
        ("weights", "bool", "marian", retype("model.safetensors", "bool"), imp, "torch.bool"),
        ("weights", "complex64", "marian", retype("model.safetensors", "complex64"), imp, "torch.complex64"),
        ("weights", "1 layer named, 2 held", "marian", set_json("config.json", encoder_layers=1), imp,
         "holds 2 layers"),
        ("weights", "NaN", "marian", retype("model.safetensors", "nan"), imp, "NaN or infinite"),
        ("weights", "inf", "marian", retype("model.safetensors", "inf"), imp, "NaN or infinite"),
        # corrupt run files in exports
        ("run files", 'metrics step "abc"', "run", metrics_line('{"step": "abc", "loss": 1.0}'),
         [*exp, "--to", "attnlab"], "metrics.jsonl"),
        ("run files", 'eval bleu "x", compact', "run", evaluation(bleu="x"), [*exp, "--to", "attnlab"], "test.json"),
        ("run files", 'eval bleu "x", huggingface', "run", evaluation(bleu="x"), [*exp, "--to", "huggingface"],
         "test.json"),
        # integrity of compact runs
        ("integrity", "int8 scale 0", "compact", int8_scale(0.0), ["evaluate", "--max-sentences", "2"], "scale"),
        ("integrity", "int8 scale -1", "compact", int8_scale(-1.0), ["evaluate", "--max-sentences", "2"], "scale"),
        ("integrity", "int8 scale 1e30", "compact", int8_scale(1e30), ["evaluate", "--max-sentences", "2"], "scale"),
        # --init of a run without a tokenizer section
        ("other", "--init run without [tokenizer]", "run", drop_tokenizer_section, ["init"], "no tokenizer section"),
    ]


# ---------------------------------------------------------------------------------------------- running
def one_case(case, src: dict[str, Path], work: Path, env: dict) -> dict:
    family, name, key, damage, command, expected = case
    slug = "".join(c if c.isalnum() else "-" for c in f"{family}-{name}")
    folder = work / "cases" / slug
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(src[key], folder)
    damage(folder)
    out = work / "out" / slug
    shutil.rmtree(out, ignore_errors=True)
    if command == ["import"]:
        argv = ["import", str(folder), "--out", str(out)]
    elif command == ["init"]:
        config = work / "init.json"
        config.write_text(json.dumps({"data": {"corpus": "files", "train": [str(work / "data" / "train.tsv")],
                                               "dev": [str(work / "data" / "dev.tsv")],
                                               "test": [str(work / "data" / "test.tsv")]},
                                      "train": {"max_steps": 2, "progress": False}}))
        argv = ["train", str(config), "--init", str(folder), "--out", str(out)]
    elif command[0] == "export":
        argv = ["export", str(folder), *command[1:], "--out", str(out)]
    else:
        argv = [command[0], str(folder), *command[1:]]
    res = _measured(argv, env, work)
    err = res["stderr"].strip().splitlines()
    errors = [line for line in err if line.startswith("attnlab: error:")]
    if "Traceback (most recent call last)" in res["stderr"]:
        outcome = "traceback"
    elif res["code"] == 0:
        outcome = "exit 0"
    elif res["code"] == 2 and len(errors) == 1 and expected in errors[0]:
        outcome = "refused"
    elif res["code"] == 2 and len(errors) == 1:
        outcome = "refused, other reason"
    else:
        outcome = f"exit {res['code']}"
    left = out.exists() and command[0] in ("import", "init")
    return {"family": family, "case": name, "outcome": outcome, "left_a_folder": left, "peak_mib": res["peak_mib"],
            "seconds": res["seconds"], "line": (errors or err or [""])[-1][:300]}


def _measured(argv: list[str], env: dict, cwd: Path) -> dict:
    """run(), with the peak RSS taken from the child's rusage."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT)))
    err = proc.stderr.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"code": proc.returncode, "stderr": err, "seconds": round(time.perf_counter() - t0, 1),
            "peak_mib": round(usage.ru_maxrss / 1024, 1)}


def debris_case(src: dict[str, Path], work: Path, env: dict) -> dict:
    """A killed export's staging folder (its process gone) is removed by the next export of that run."""
    run_copy = work / "cases" / "debris-run"
    shutil.rmtree(run_copy, ignore_errors=True)
    shutil.copytree(src["run"], run_copy)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    out = run_copy.parent / "debris-export"
    shutil.rmtree(out, ignore_errors=True)
    staging = run_copy.parent / f".debris-export.p{dead}.0badcafe.tmp"
    (staging / "checkpoints").mkdir(parents=True, exist_ok=True)
    res = _measured(["export", str(run_copy), "--to", "attnlab", "--out", str(out)], env, work)
    ok = res["code"] == 0 and not staging.exists() and out.is_dir()
    return {"family": "debris", "case": "a killed export's staging folder", "outcome": "cleaned" if ok else
            f"left (exit {res['code']})", "left_a_folder": staging.exists(), "peak_mib": res["peak_mib"],
            "seconds": res["seconds"], "line": ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ATTNLAB_CACHE": str(work / "cache")}
    env.pop("ATTNLAB_RAISE_INTERNAL", None)  # what a user sees
    src = make_sources(work, env)
    all_cases = cases(src)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: one_case(c, src, work, env), all_cases))
    results.append(debris_case(src, work, env))
    counts: dict[str, int] = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        print(f"{r['outcome']:24s} {r['peak_mib']!s:>7} MiB  {r['family']}: {r['case']}  {r['line'][:110]}", flush=True)
    refusals = [r for r in results if r["outcome"].startswith("refused")]
    worst = max(refusals, key=lambda r: r["peak_mib"] or 0, default=None)
    summary = {"cases": len(results), **counts, "left_a_folder": sum(r["left_a_folder"] for r in results),
               "worst_refusal_peak_mib": worst and worst["peak_mib"], "worst_refusal": worst and worst["case"],
               "seconds": round(time.perf_counter() - t0)}
    print(json.dumps(summary))
    write_json(args.json, {"summary": summary, "cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
