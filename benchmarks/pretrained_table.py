#!/usr/bin/env python
"""docs/results.md's tables of the shipped models from the raw outputs: the pack's evaluations
(`scripts/pack_pretrained.py --json PACK`), the proper-name shares (`benchmarks/proper_names.py --json NAMES`) and
the training runs' metrics.jsonl (updates, minutes). Prints Markdown.

    python benchmarks/pretrained_table.py PACK NAMES --runs runs/pretrained [--also PACK2]

--also: a later pack's lines (`scripts/pack_pretrained.py --decode-again`), which replace PACK's test evaluations
and showcase of the same model; the weights' choice and the averaging's effect stay PACK's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ORDER = ("noattn", "luong", "bahdanau", "transformer")


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def training(run: Path) -> tuple[int, float]:
    records = rows(run / "metrics.jsonl")
    return max(r["step"] for r in records), max(r.get("time_s", 0) for r in records) / 60


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument("names", type=Path)
    ap.add_argument("--runs", type=Path, default=Path("runs/pretrained"))
    ap.add_argument("--also", type=Path, help="a later pack of the same weights, whose evaluations replace PACK's")
    args = ap.parse_args()
    pack = rows(args.pack)
    later = rows(args.also) if args.also else []
    names = {}
    for r in rows(args.names):  # keyed by the model: the run folder's name up to its first "-" (noattn-int8)
        model = Path(r["run"]).name.split("-")[0]
        if model in names:
            raise SystemExit(f"{args.names}: two runs of {model} ({names[model]['run']}, {r['run']}): give one names "
                             "file per table")
        names[model] = r
    shipped = {}
    for r in pack + later:  # a later line replaces an earlier one of the same model and source
        model = r["model"].split()[0]
        if r.get("split") == "test" and r["model"].endswith("int8"):
            shipped.setdefault(model, {})[r["source"]] = r
    chosen = {r["model"]: r for r in pack if "chosen" in r}
    print("| model | updates (minutes) | weights | test BLEU KJV / chrF | WEB | WEB / KJV | 1-10 | 11-20 | 21-30 | 31+ "
          "| 11-20 to 31+ | names right (verses) | repeating |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in ORDER:
        if m not in shipped:
            continue
        kjv, web = shipped[m]["kjv"], shipped[m]["web"]
        by = {b["bucket"]: b["bleu"] for b in kjv["by_length"]}
        steps, minutes = training(args.runs / m)
        drop = 100 * (by["31+"] - by["11-20"]) / by["11-20"] if by.get("11-20") else float("nan")
        n = names.get(m, {})
        print(f"| {m} | {steps:,} ({minutes:.0f}) | {chosen.get(m, {}).get('chosen', 'best')} | **{kjv['bleu']:.2f}** / "
              f"{kjv['chrf']:.2f} | {web['bleu']:.2f} | {100 * web['bleu'] / kjv['bleu']:.1f}% | "
              + " | ".join(f"{by.get(b, float('nan')):.2f}" for b in ("1-10", "11-20", "21-30", "31+"))
              + f" | {drop:+.0f}% | {100 * n.get('share_names', float('nan')):.1f}% "
                f"({100 * n.get('share_verses', float('nan')):.1f}%) | {100 * n.get('share_repeating', float('nan')):.1f}% |")
    print()
    tests = {(r["model"], r["source"]): r for r in pack if r.get("split") == "test"}
    for m, c in chosen.items():
        best, avg = tests.get((f"{m} best float32", "kjv")), tests.get((f"{m} avg5 float32", "kjv"))
        line = f"- {m}: dev BLEU best {c['dev_bleu_best']:.2f}, average of the last 5 {c['dev_bleu_avg']:.2f}"
        if best and avg:
            line += f"; test BLEU best {best['bleu']:.2f}, average {avg['bleu']:.2f} ({avg['bleu'] - best['bleu']:+.2f})"
        print(line + f"; shipped: {c['chosen']}")
    print()
    show = {r["model"]: r["showcase"] for r in pack + later if "showcase" in r}
    models = [m for m in ORDER if m in show]
    print("| verse | " + " | ".join(models) + " |")
    print("|---|" + "---|" * len(models))
    for k, v in enumerate(show[models[0]]):
        cells = [f"{show[m][k]['output']} ({show[m][k]['chrf']:.0f})".replace("|", "\\|") for m in models]
        print(f"| {v['ref']}: {v['source']} <br> *{v['reference']}* | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
