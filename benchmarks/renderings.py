#!/usr/bin/env python
"""Single-source against several-source training, scored from every English rendering (issue 24).

Each run is evaluated on the test split from each rendering (`attnlab evaluate RUN --split test --source S`, its
beam: the run's decode.beam_size); an evaluation already in RUN_DIR/eval/ at that beam and checkpoint is read,
not redone. Prints a markdown table (BLEU/chrF per run and source, the WEB/KJV ratio, the updates made) and a few
WEB-source test verses with every run's translation side by side; --json writes one JSON line per run and source
and one per sample.

    python benchmarks/renderings.py NAME=RUN_DIR ... [--sources kjv,web] [--samples 6] [--json OUT.jsonl]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnlab.app import api
from attnlab.core.checkpoint import read_json
from attnlab.data.bible import bible_split
from attnlab.families.translation import eval_name


def evaluation(run: api.Run, source: str) -> dict:
    """The run's test evaluation from `source`: read from RUN_DIR/eval/ when done there at the run's beam with the
    same checkpoint, else computed (and written there)."""
    path = run.path / "eval" / f"{eval_name(run.config, 'test', source)}.json"
    if path.is_file():
        done = read_json(path)
        if done.get("beam") == run.config.decode.beam_size and done.get("checkpoint") == run.checkpoint \
                and done.get("sentences") == len(bible_split(source, "test")):
            return done
    return run.evaluate("test", source=source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="NAME=RUN_DIR")
    parser.add_argument("--sources", default="kjv,web")
    parser.add_argument("--samples", type=int, default=6, help="WEB-source test verses shown side by side")
    parser.add_argument("--max-words", type=int, default=18, help="samples: verses of at most this many words")
    parser.add_argument("--json", type=Path, help="write the rows as JSON lines")
    args = parser.parse_args()
    sources = args.sources.split(",")
    rows, hyps = [], {}
    for item in args.runs:
        name, _, where = item.partition("=")
        run = api.load(where)
        facts = run.facts()
        for source in sources:
            ev = evaluation(run, source)
            rows.append({"run": name, "dir": where, "family": facts["family"], "trained_on": run.renderings,
                         "updates": facts["steps"], "source": source, "bleu": round(ev["bleu"], 2),
                         "chrf": round(ev["chrf"], 2), "sentences": ev["sentences"], "beam": ev["beam"],
                         "checkpoint": ev["checkpoint"], "bleu_signature": ev["bleu_signature"]})
            hyp = run.path / "eval" / f"{eval_name(run.config, 'test', source)}.hyp.txt"
            hyps[name, source] = hyp.read_text(encoding="utf-8").splitlines()
    print("| run | trained on | updates | source | BLEU | chrF |")
    print("|---|---|---:|---|---:|---:|")
    for r in rows:
        print(f"| {r['run']} | {' + '.join(r['trained_on'])} | {r['updates']:,} | {r['source']} | {r['bleu']:.2f} | "
              f"{r['chrf']:.2f} |")
    bleu = {(r["run"], r["source"]): r["bleu"] for r in rows}
    if {"kjv", "web"} <= set(sources):
        print()
        for name in dict.fromkeys(r["run"] for r in rows):
            print(f"{name}: WEB-source BLEU = {bleu[name, 'web'] / max(bleu[name, 'kjv'], 1e-9):.1%} of KJV-source")
    samples = []
    if "web" in sources and args.samples:
        web, kjv = bible_split("web", "test"), {p.ref: p.src for p in bible_split("kjv", "test")}
        short = [i for i, p in enumerate(web) if len(p.src.split()) <= args.max_words]
        for i in short[:: max(1, len(short) // args.samples)][: args.samples]:
            samples.append({"ref": web[i].ref, "web": web[i].src, "kjv": kjv.get(web[i].ref, ""),
                            "reference": web[i].tgt,
                            "translations": {n: hyps[n, "web"][i] for n in dict.fromkeys(r["run"] for r in rows)}})
        print()
        for s in samples:
            print(f"**{s['ref']}**  \nWEB: {s['web']}  \nKJV: {s['kjv']}  \nreference (RV1909): {s['reference']}  ")
            for name, text in s["translations"].items():
                print(f"{name}: {text}  ")
            print()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
            for s in samples:
                f.write(json.dumps({"sample": s}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
