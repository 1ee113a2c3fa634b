#!/usr/bin/env python
"""Makes the trained models that ship with attnlab (src/attnlab/trained/NAME) from trained runs.

    python scripts/pack_pretrained.py [--runs runs/pretrained] [--quantization int8] [--average 5] [--evaluate-only]
        [NAME ...]

Each NAME (bahdanau, luong, noattn, transformer) is first trained with its packaged config by
`bash scripts/train_pretrained.sh` (configs/pretrained/NAME.toml: English KJV + WEB to Spanish). Then, for each:

1. the weights to ship: the mean of the run's last --average checkpoints (`attnlab average`, Vaswani et al. 2017)
   or the run's best checkpoint, whichever has the higher dev BLEU (beam 5, the 222 dev verses: the test split
   chooses nothing); with --test-both, both are also evaluated on the test verses (the averaging's effect);
2. the compact run (`attnlab.runs.shipped.compact_run`) goes to RUNS/NAME-QUANTIZATION and is evaluated there on the
   918 test verses from both English renderings (beam 5: the scores of the weights as they ship);
3. it translates the showcase verses (`attnlab.runs.shipped.SHOWCASE`, KJV source, beam 5; sentence chrF against
   the Reina-Valera 1909), and is written again with its scores and showcase into the package.

Every evaluation decodes with the run's own settings (its config.json's [decode], beam 5), which a resumed run
keeps from its start; when the recipe's [decode] differs, --decode-again brings it to the package.

With --decode-again, nothing is trained, averaged or chosen: each shipped model's weights stay as they are and
its decode settings become those of configs/pretrained/NAME.toml's [decode] (e.g. a length penalty chosen on dev,
`benchmarks/length_penalty_sweep.py`). A copy of the package (RUNS/NAME-QUANTIZATION-decode) is evaluated on the
test verses and the showcase with them, and the package is written again from it (steps 2-3).

Every evaluation is printed as one JSON line (--json FILE: also appended there).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from attnlab.app.api import load
from attnlab.core.config import read_config_file
from attnlab.core.fileio import read_json, write_json
from attnlab.core.metrics import sentence_chrf
from attnlab.data.bible import bible_tsv, iter_bible
from attnlab.runs.shipped import SHOWCASE, compact_run, trained_folder
from attnlab.runs.workflow import average_run, load_run

TITLES = {
    "bahdanau": "Bahdanau (additive) attention, bidirectional GRU encoder-decoder",
    "luong": "Luong (general) attention, scaled scores, bidirectional GRU encoder-decoder",
    "noattn": "GRU encoder-decoder without attention, one direction: c = h_T (Cho et al. 2014)",
    "transformer": "Transformer encoder-decoder, small (3+3 layers, d_model 256, pre-norm)",
}
SOURCES = ("kjv", "web")


def emit(record: dict, out: Path | None) -> None:
    line = json.dumps(record)
    print(line, flush=True)
    if out is not None:
        with out.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


def scores(run_dir: Path, label: str, out: Path | None, split: str = "test", sources=SOURCES) -> dict[str, float]:
    bleu = {}
    for source in sources:
        t0 = time.perf_counter()
        r = load(run_dir).evaluate(split, source=source)
        bleu[source] = r["bleu"]
        emit({"model": label, "split": split, "source": source, "bleu": round(r["bleu"], 2),
              "chrf": round(r["chrf"], 2), "sentences": r["sentences"],
              "by_length": [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in b.items()}
                            for b in r["by_length"]],
              "seconds": round(time.perf_counter() - t0, 1)}, out)
    return bleu


def showcase_verses() -> list[dict]:
    """The SHOWCASE verses: reference, KJV source and Reina-Valera 1909 target, from the Bible corpus."""
    _, rows = iter_bible(bible_tsv("kjv"))
    found = {ref: (src, tgt) for _, ref, src, tgt in rows if ref in SHOWCASE}
    missing = [ref for ref in SHOWCASE if ref not in found]
    if missing:
        raise SystemExit(f"showcase verses not in the corpus: {missing}")
    return [{"ref": ref, "source": found[ref][0], "reference": found[ref][1]} for ref in SHOWCASE]


def showcase(run_dir: Path, verses: list[dict]) -> list[dict]:
    run = load(run_dir, device="cpu")
    outputs = run.translate([v["source"] for v in verses])
    return [{**v, "output": o, "chrf": round(sentence_chrf(o, v["reference"]), 1)} for v, o in zip(verses, outputs)]


def decode_again(name: str, runs: Path, quantization: str, verses: list[dict], out: Path | None) -> None:
    """The shipped package `name` with configs/pretrained/NAME.toml's decode settings: evaluated (test, both
    sources; showcase) in a copy, then written again into the package. The weights are not touched."""
    package = trained_folder() / name
    work = runs / f"{name}-{quantization}-decode"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(package, work)
    shutil.rmtree(work / "eval", ignore_errors=True)
    decode = read_config_file(f"pretrained/{name}")["decode"]  # the packaged recipe, configs/pretrained/NAME.toml
    config = read_json(work / "config.json")
    unknown = sorted(set(decode) - set(config["decode"]))
    if unknown:
        raise SystemExit(f"configs/pretrained/{name}.toml: [decode] keys the package does not have: "
                         f"{', '.join(unknown)}")
    config["decode"].update(decode)
    write_json(work / "config.json", config, work)
    emit({"model": name, "decode": config["decode"]}, out)
    scores(work, f"{name} {quantization}", out)
    shown = showcase(work, verses)
    emit({"model": name, "showcase": shown}, out)
    written = compact_run(load_run(work), package, quantization, TITLES[name], name, showcase=shown)
    emit({"model": name, "packed": str(written), "weights": "as shipped",
          "bytes": sum(p.stat().st_size for p in written.rglob("*") if p.is_file())}, out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=sorted(TITLES))
    ap.add_argument("--runs", type=Path, default=Path("runs/pretrained"))
    ap.add_argument("--quantization", default="int8")
    ap.add_argument("--average", type=int, default=5, help="checkpoints to average (0: never average)")
    ap.add_argument("--test-both", action="store_true",
                    help="also evaluate the best checkpoint and the average on the test verses (float32)")
    ap.add_argument("--json", type=Path, help="append every evaluation's JSON line to this file")
    ap.add_argument("--evaluate-only", action="store_true",
                    help="steps 1-3 only: the package is left as it is (a run trained for comparison, e.g. "
                         "RUNS/noattn_sutskever)")
    ap.add_argument("--decode-again", action="store_true",
                    help="the shipped weights as they are, with configs/pretrained/NAME.toml's [decode] settings: "
                         "evaluated again and the package rewritten (nothing trained, averaged or chosen)")
    args = ap.parse_args()
    unknown = [name for name in args.names if name not in TITLES]
    if unknown and not args.evaluate_only:
        raise SystemExit(f"not shipped models: {', '.join(unknown)} (shipped: {', '.join(sorted(TITLES))}); "
                         "--evaluate-only evaluates them without packing")
    verses = showcase_verses()
    if args.decode_again:
        for name in args.names:
            decode_again(name, args.runs, args.quantization, verses, args.json)
        return 0
    for name in args.names:
        run_dir = args.runs / name
        chosen, label = run_dir, "best"
        if args.average:
            avg = args.runs / f"{name}-avg{args.average}"
            shutil.rmtree(avg, ignore_errors=True)
            average_run(run_dir, args.average, avg)
            dev_best = scores(run_dir, f"{name} best float32", args.json, "dev", ("kjv",))["kjv"]
            dev_avg = scores(avg, f"{name} avg{args.average} float32", args.json, "dev", ("kjv",))["kjv"]
            if args.test_both:
                scores(run_dir, f"{name} best float32", args.json)
                scores(avg, f"{name} avg{args.average} float32", args.json)
            if dev_avg > dev_best:
                chosen, label = avg, f"avg{args.average}"
            emit({"model": name, "chosen": label, "dev_bleu_best": round(dev_best, 2),
                  "dev_bleu_avg": round(dev_avg, 2)}, args.json)
        compact = args.runs / f"{name}-{args.quantization}"
        shutil.rmtree(compact, ignore_errors=True)
        title = TITLES.get(name, name)
        compact_run(load_run(chosen), compact, args.quantization, title, name)
        scores(compact, f"{name} {args.quantization}", args.json)
        shown = showcase(compact, verses)
        emit({"model": name, "showcase": shown}, args.json)
        if args.evaluate_only:
            continue
        out = compact_run(load_run(compact), trained_folder() / name, args.quantization, title, name,
                          showcase=shown)
        emit({"model": name, "packed": str(out), "weights": label,
              "bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file())}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
