#!/usr/bin/env python
"""Proper names copied right, and words repeated: of the test verses, those with a name spelled the same in the KJV
source and the Reina-Valera 1909 reference (a capitalised word, not the first of either sentence, found in both:
Elimelech, Moab, Jerusalem), the share whose translation contains every such name, and the share of the names
themselves; and the share of translations that repeat a word 3-gram more often than their reference does ("y á
su madre, y á su madre").
Reads each run's beam-5 test translations (RUN_DIR/eval/test.hyp.txt, written by `attnlab evaluate RUN_DIR --split
test`, in the test split's order) and the Bible corpus' test split (KJV source).

    python benchmarks/proper_names.py RUN_DIR [RUN_DIR ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from attnlab.data.bible import bible_split
from attnlab.runs.shipped import run_path

WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def names(source: str, reference: str) -> set[str]:
    """The capitalised words (not sentence-initial) that both sentences spell alike."""
    def capitalised(text: str) -> set[str]:
        words = WORD.findall(text)
        return {w for w in words[1:] if w[0].isupper() and not w.isupper()}  # LORD, JEHOVÁ: not names here
    return capitalised(source) & capitalised(reference)


def repeated(text: str) -> int:
    """How many word 3-grams occur more than once in the text (case-folded, punctuation dropped)."""
    words = [w.lower() for w in WORD.findall(text)]
    grams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    return len(grams) - len(set(grams))


def score(run_dir: Path, verses: list[tuple[str, str]]) -> dict:
    hyps = (run_dir / "eval" / "test.hyp.txt").read_text(encoding="utf-8").split("\n")[: len(verses)]
    if len(hyps) != len(verses):
        raise SystemExit(f"{run_dir}: {len(hyps)} translations for {len(verses)} test verses")
    with_names = right = total = found = 0
    for (src, ref), hyp in zip(verses, hyps):
        wanted = names(src, ref)
        if not wanted:
            continue
        got = set(WORD.findall(hyp))
        with_names += 1
        right += wanted <= got
        total += len(wanted)
        found += len(wanted & got)
    repeats = sum(repeated(hyp) > repeated(ref) for (_, ref), hyp in zip(verses, hyps))
    return {"run": str(run_dir), "repeating": repeats, "share_repeating": round(repeats / len(verses), 4),
            "verses_with_names": with_names, "verses_all_names_right": right,
            "share_verses": round(right / max(1, with_names), 4), "names": total, "names_right": found,
            "share_names": round(found / max(1, total), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    verses = [(p.src, p.tgt) for p in bible_split("kjv", "test")]
    out = [score(run_path(r), verses) for r in args.runs]
    for o in out:
        print(json.dumps(o))
    if args.json:
        args.json.write_text("".join(json.dumps(o) + "\n" for o in out), encoding="utf-8")


if __name__ == "__main__":
    main()
