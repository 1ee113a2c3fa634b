"""Trained models that ship with attnlab, and the compact run format they ship in.

A compact run (`compact_run`, `attnlab export RUN --to attnlab`) is an ordinary run directory without the training
state: config.json, tokenizer/, metrics.jsonl, one weights file (`attnlab.core.checkpoint.save_weights`, float32, bfloat16 or int8
with a scale per row) named both best and last, the run's evaluations (eval/*.json) and a model card (README.md,
and card.json for programs). Every command loads it like the run it came from.

The shipped models are compact runs in the package's `trained/` folder. `pretrained:NAME` (NAME one of
`shipped_names()`) names one wherever a run directory is asked for: `shipped_run` copies it once into the cache
($ATTNLAB_CACHE/pretrained/NAME-<hash of its weights>), a folder the user may write into (evaluations, exports),
so the installed package is never written.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from attnlab.core.checkpoint import QUANTIZATIONS, STEP_NAME, resolve_checkpoint, write_weights_run
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import (atomic_write_text, cache_dir, check_replaceable_folder, file_sha256, new_folder,
                                 read_json, replace_folder, sync_path, write_json)
from attnlab.core.logs import read_metrics
from attnlab.core.metrics import is_length_rows, is_score
from attnlab.families.base import LoadedRun

log = logging.getLogger("attnlab")

PREFIX = "pretrained:"
# the verses a class types first (issue 46): each shipped model's card shows its output for them, and the notebooks
# show only those it gets right. Bible references as the corpus writes them; the last two are test verses.
SHOWCASE = ("Gen 1:1", "Gen 1:3", "Exod 20:13", "Ps 23:1", "Matt 5:9", "Luke 2:14", "John 1:1", "John 3:16",
            "John 11:35", "Rom 6:23", "Ruth 1:16", "Mark 12:31")
CARD_FILES = ("README.md", "card.json")
COMPACT_ENTRIES = ("config.json", "tokenizer", "checkpoints", "eval", "metrics.jsonl", *CARD_FILES)


@dataclass(frozen=True)
class Shipped:
    """One shipped model as `attnlab pretrained` lists it (from its card.json)."""
    name: str
    title: str
    family: str
    parameters: int
    quantization: str
    megabytes: float
    bleu: dict[str, float]  # test BLEU (beam 5) by English source rendering ("kjv", "web")
    chrf: dict[str, float]
    updates: int
    minutes: float


def trained_folder() -> Path:
    """The package folder of the shipped models (one compact run per subfolder)."""
    return Path(str(importlib.resources.files("attnlab") / "trained"))


def shipped_names() -> list[str]:
    folder = trained_folder()
    return sorted(p.name for p in folder.iterdir() if (p / "card.json").is_file()) if folder.is_dir() else []


def shipped_models() -> list[Shipped]:
    """The shipped models, by name, as their cards describe them."""
    out = []
    for name in shipped_names():
        card = read_json(trained_folder() / name / "card.json")
        try:
            out.append(Shipped(name=name, **{k: card[k] for k in Shipped.__dataclass_fields__ if k != "name"}))
        except (KeyError, TypeError):
            raise AttnlabError(f"{trained_folder() / name / 'card.json'}: not a model card of this attnlab "
                               "(reinstall attnlab)") from None
    return out


def is_shipped_name(value: str | Path) -> bool:
    return str(value).startswith(PREFIX)


def run_path(value: str | Path) -> Path:
    """A run directory from what a user typed: `pretrained:NAME` is a shipped model (`shipped_run`), anything else
    a path."""
    return shipped_run(str(value)[len(PREFIX):]) if is_shipped_name(value) else Path(value)


def shipped_run(name: str) -> Path:
    """The run directory of the shipped model NAME: its compact run copied into the cache on first use (keyed by
    the hash of its weights, so a new attnlab version gets a new copy), then reused."""
    names = shipped_names()
    if name not in names:
        choices = ", ".join(names) or "none: this attnlab was installed without its trained models"
        raise AttnlabError(f"pretrained:{name}: no such shipped model (choose one of: {choices})")
    src = trained_folder() / name
    key = _package_sha256(resolve_checkpoint(src, "best"))[:12]
    dest = cache_dir() / "pretrained" / f"{name}-{key}"
    if not _complete_copy(dest, src):
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = new_folder(dest.parent, dest.name)
        try:
            shutil.copytree(src, tmp, dirs_exist_ok=True)
            for f in tmp.rglob("*"):
                if f.is_file():
                    sync_path(f)
            try:  # one atomic rename that never replaces a folder already there: several first uses at once (a
                os.rename(tmp, dest)  # class sharing a cache) each find a complete copy, none moved while read
            except OSError:
                if not _complete_copy(dest, src):  # a damaged copy is replaced; a link or a file refused, named
                    replace_folder(tmp, dest)
            log.info("pretrained:%s: in %s", name, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


# the installed package's files do not change while attnlab runs: each is hashed once per process (the cache copy,
# which a user may edit, is hashed on every load)
_package_sha256 = functools.lru_cache(maxsize=None)(file_sha256)


def _complete_copy(dest: Path, src: Path | None = None) -> bool:
    """Whether the cache holds the copy: a real folder (never a link) with its config.json (the rename that
    publishes it moves a complete folder) and, given the package's folder `src`, the same bytes in its weights
    file, config.json, card.json and tokenizer files (a copy damaged or edited in the cache is not used)."""
    if not (dest.is_dir() and not dest.is_symlink() and (dest / "config.json").is_file()):
        return False
    if src is None:
        return True
    for f in sorted(src.rglob("*")):
        if f.is_file() and (f.suffix == ".safetensors" or f.name in ("config.json", "card.json")
                            or "tokenizer" in f.parts):
            copy = dest / f.relative_to(src)
            if not copy.is_file() or copy.is_symlink() or file_sha256(copy) != _package_sha256(f):
                log.warning("pretrained: %s differs from the package's %s; copying it again", copy, f)
                return False
    return True


def length_scores(run_dir: Path) -> list[dict]:
    """The test BLEU by source length of a run, [{bucket: str, bleu: float, sentences: int}]: its model card's
    (card.json "by_length": the figures a shipped model ships with, which an evaluation of its copy in the cache
    does not change), else its evaluation's (eval/test.json), else []. A run folder may come from someone else: a
    file without such rows gives [], with a warning."""
    card = Path(run_dir) / "card.json"
    for path in (card, Path(run_dir) / "eval" / "test.json"):
        if not path.is_file():
            continue
        try:
            record = read_json(path)
        except AttnlabError as e:
            log.warning("%s", e)
            return []
        if path == card and isinstance(record, dict) and "by_length" not in record:
            continue  # a card without them (its run had no evaluation when it was made)
        rows = record.get("by_length", []) if isinstance(record, dict) else None
        if not is_length_rows(rows):
            log.warning("%s: not rows of BLEU by length (bucket, sentences, bleu); left out", path)
            return []
        return [{"bucket": r["bucket"], "bleu": float(r["bleu"]), "sentences": r["sentences"]} for r in rows]
    return []


def _evaluations(run_dir: Path) -> dict[str, tuple[str, dict]]:
    """The run's test evaluations by English source rendering: {source: (file name, result)} of eval/test*.json."""
    out = {}
    for path in sorted((run_dir / "eval").glob("test*.json")):
        result = read_json(path)
        rows = result.get("by_length", []) if isinstance(result, dict) else None
        if not (isinstance(result, dict) and result.get("split") == "test" and is_score(result.get("bleu"))
                and is_score(result.get("chrf", 0.0)) and is_length_rows(rows)):
            raise AttnlabError(f"{path}: not a test evaluation attnlab wrote (split test, bleu and chrf numbers, "
                               "by_length rows of bucket, bleu, sentences); evaluate the run again")
        out[str(result.get("source") or "test")] = (path.name, result)
    return out


def _training(run_dir: Path) -> tuple[int, float]:
    """(updates, minutes of training) from the run's metrics.jsonl: the last logged step and time."""
    step, seconds = 0, 0.0
    for row in read_metrics(run_dir):  # checked records: a corrupt file is one line naming it and the line
        step = max(step, row["step"])
        seconds = max(seconds, float(row.get("time_s") or 0.0))
    return step, seconds / 60


def decoding(settings: Iterable[Mapping]) -> str:
    """"beam 5, length penalty 1" when every evaluation (or decode setting) in `settings` shares them; a setting they
    do not all record (evaluations written before the length penalty was) is left out."""
    settings = list(settings)
    parts = []
    for key, label in (("beam", "beam"), ("length_penalty", "length penalty")):
        values = {s.get(key) for s in settings}
        if settings and len(values) == 1 and None not in values:
            parts.append(f"{label} {values.pop():g}")
    return ", ".join(parts) or "the run's decode settings"


def decode_settings(run: LoadedRun) -> dict:
    """{"beam", "length_penalty"} of the run's config (what `run.translate` uses by default); None for a setting the
    run's family has no decode section for."""
    decode = getattr(run.cfg, "decode", None)
    return {"beam": getattr(decode, "beam_size", None), "length_penalty": getattr(decode, "length_penalty", None)}


def model_card(run: LoadedRun, title: str, quantization: str, parameters: int, megabytes: float,
               evaluations: dict[str, dict], updates: int, minutes: float, name: str, out: Path,
               showcase: list[dict] | None = None, averaged: list[int] | None = None) -> str:
    """The README.md of a compact run: what the model is, its data, training budget, test scores, how to load."""
    data = getattr(run.cfg, "data", None)
    lines = [f"# {title}", "",
             f"An attnlab {run.family.title} run ({parameters:,} parameters), stored {quantization} "
             f"({megabytes:.1f} MB).", "", "## Data", ""]
    if data is not None and getattr(data, "corpus", "") == "bible" and hasattr(data, "renderings"):  # translation
        weights = list(getattr(data, "english_weights", None) or [])
        drawn = ("" if not weights or set(weights) == {1} else "; each epoch draws " + ", ".join(
            f"{rendering}'s verses {w} time{'s' if w > 1 else ''}" for rendering, w in zip(data.renderings, weights)))
        lines += [f"English ({' + '.join(data.renderings)}) to Spanish (Reina-Valera 1909) Bible verses from Debian's "
                  f"SWORD packages, training verses of at most {data.max_words} words{drawn}; attnlab's dev and "
                  "test splits (the test split is never trained on).", ""]
    else:
        lines += ["See config.json (section data).", ""]
    lines += ["## Training", "", f"{updates:,} updates in {minutes:.1f} minutes (metrics.jsonl of the original run); "
              "the full configuration is config.json.", ""]
    if averaged:
        lines += [f"The weights are the mean of the checkpoints of steps {', '.join(map(str, averaged))}.", ""]
    lines += [f"## Test scores ({decoding(evaluations.values())}, sacrebleu)", "",
              "| English source | sentences | BLEU | chrF |", "|---|---|---|---|"]
    for source, r in evaluations.items():
        lines.append(f"| {source} | {r.get('sentences')} | {r['bleu']:.2f} | {r.get('chrf', float('nan')):.2f} |")
    if not evaluations:
        lines.append("| (not evaluated) | | | |")
    by_length = {source: r["by_length"] for source, r in evaluations.items() if r.get("by_length")}
    if by_length:
        buckets = list(dict.fromkeys(b["bucket"] for rows in by_length.values() for b in rows))
        lines += ["", "BLEU by source length (words; the chart of the four shipped models: docs/img/"
                      "pretrained_bleu_by_length.png in attnlab's repository):", "",
                  "| English source | " + " | ".join(buckets) + " |", "|---|" + "---|" * len(buckets)]
        for source, rows in by_length.items():
            scores = {b["bucket"]: f"{b['bleu']:.2f} ({b['sentences']})" for b in rows}
            lines.append(f"| {source} | " + " | ".join(scores.get(b, "") for b in buckets) + " |")
    if showcase:
        def cell(text: str) -> str:
            return text.replace("|", "\\|")

        lines += ["", "## The verses a class types first", "",
                  f"KJV source, this model's translation ({decoding([decode_settings(run)])}), the Reina-Valera "
                  "1909 verse and the sentence chrF:",
                  "", "| verse | English | translation | RV 1909 | chrF |", "|---|---|---|---|---|"]
        for v in showcase:
            lines.append(f"| {v['ref']} | {cell(v['source'])} | {cell(v['output'])} | {cell(v['reference'])} | "
                         f"{v['chrf']:.1f} |")
    target = f"pretrained:{name}" if name else str(out)
    lines += ["", "## Use", "", "```", f"attnlab translate {target}", f"attnlab serve {target}", "```", "",
              "```python", "import attnlab", f"run = attnlab.load({target!r})",
              "print(run.translate('In the beginning God created the heaven and the earth.'))", "```", ""]
    return "\n".join(lines)


def check_compact_out(out: Path, src: Path) -> None:
    """Refuses, naming it, an `--out` that a compact run must not replace: what `check_replaceable_folder` refuses,
    the run it is made from, and a folder holding any run but an earlier compact one (one with its card.json and
    no training state: a training run holds the same top-level names)."""
    if out.is_dir() and out.resolve() == src.resolve():
        raise AttnlabError(f"--out {out}: is the run the compact one is made from; choose another folder")
    check_replaceable_folder(out, lambda entry: entry in COMPACT_ENTRIES, "part of a compact attnlab run")
    if not out.is_dir() or not any(out.iterdir()):
        return
    training = sorted(p.name for p in (out / "checkpoints").glob("*.train.safetensors")) \
        if (out / "checkpoints").is_dir() else []
    if training or not (out / "card.json").is_file():
        what = f"training state ({training[0]})" if training else "no card.json"
        raise AttnlabError(f"{out}: holds a run that is not a compact one ({what}); attnlab replaces only an "
                           "earlier compact run: choose a new or empty folder")


def compact_run(run: LoadedRun, out: Path | str, quantization: str = "int8", title: str | None = None,
                name: str = "", averaged: list[int] | None = None, showcase: list[dict] | None = None) -> Path:
    """Writes the compact run of `run` (its best or last weights, as loaded) to `out`: config.json, tokenizer/,
    checkpoints/ with one step (the original's number) stored in `quantization`, eval/*.json, README.md and
    card.json (with eval/test.json's BLEU by source length). `averaged`: the steps whose mean `run.model` holds
    (`attnlab.core.checkpoint.average_into`), named in the card; the run's evaluations, which belong to other
    weights, are then left out. `showcase`: the model's
    outputs for the SHOWCASE verses ({ref, source, reference, output, chrf}), in card.json and the README. `out`
    must be new, empty, or an earlier compact run. Returns out."""
    if quantization not in QUANTIZATIONS:
        raise AttnlabError(f"--quantization {quantization!r}: a compact run is one of {', '.join(QUANTIZATIONS)}")
    out = Path(out)
    src = Path(run.run_dir)
    check_compact_out(out, src)
    match = STEP_NAME.fullmatch(resolve_checkpoint(src, run.checkpoint).stem)
    step = int(match.group(1)) if match else 0  # a legacy best.safetensors: step 0
    evaluations = {} if averaged else _evaluations(src)
    if not averaged:  # a compact run of an averaged one (int8 of the float32 average) keeps what it holds
        earlier = read_json(src / "card.json") if (src / "card.json").is_file() else {}
        steps = earlier.get("averaged_steps") if isinstance(earlier, dict) else None
        averaged = [int(n) for n in steps] if isinstance(steps, list) and all(type(n) is int for n in steps) \
            else None
    updates, minutes = _training(src)
    parameters = sum(p.numel() for p in run.model.parameters())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_folder(out.parent, out.name)
    try:
        shutil.copy2(src / "config.json", tmp / "config.json")
        if (src / "metrics.jsonl").is_file():  # the training curve: attnlab plot curves works on a compact run
            shutil.copy2(src / "metrics.jsonl", tmp / "metrics.jsonl")
        if (src / "tokenizer").is_dir():
            shutil.copytree(src / "tokenizer", tmp / "tokenizer")
        write_weights_run(tmp, run.model, step, quantization)
        for file_name, result in evaluations.values():  # without the plot's path, which is not copied
            write_json(tmp / "eval" / file_name, {k: v for k, v in result.items() if k != "plot"}, tmp)
        headline = next((result for file_name, result in evaluations.values() if file_name == "test.json"), None)
        evaluations = {source: result for source, (_, result) in evaluations.items()}
        megabytes = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()) / 1e6
        title = title or f"{run.family.title} ({src.name})"
        card = {"title": title, "family": run.family.name, "parameters": parameters, "quantization": quantization,
                "megabytes": round(megabytes, 2), "bleu": {s: round(r["bleu"], 2) for s, r in evaluations.items()},
                "chrf": {s: round(float(r.get("chrf", 0.0)), 2) for s, r in evaluations.items()},
                "updates": updates, "minutes": round(minutes, 1), "made": time.strftime("%Y-%m-%d")}
        if headline is not None and headline.get("by_length"):  # the figures it ships with: the compare view's
            card["by_length"] = [{"bucket": r["bucket"], "bleu": round(r["bleu"], 2), "sentences": r["sentences"]}
                                 for r in headline["by_length"]]  # (an evaluation of the cache copy changes eval/)
        if averaged:
            card["averaged_steps"] = list(averaged)
        if showcase:
            card["showcase"] = [{k: v[k] for k in ("ref", "source", "reference", "output", "chrf")} for v in showcase]
        write_json(tmp / "card.json", card, tmp)
        atomic_write_text(tmp / "README.md", model_card(run, title, quantization, parameters, megabytes, evaluations,
                                                        updates, minutes, name, out, showcase, averaged), tmp)
        replace_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
