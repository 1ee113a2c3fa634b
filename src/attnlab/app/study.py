"""Studies that run the pipeline several times: the series family's multi-seed comparison of a many-to-one RNN
without and with attention (the seed's claim that attention lowers the test MSE), each model trained through
`attnlab.runs.workflow.train` and scored on the same split.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import statistics
import time
from pathlib import Path

from attnlab.core.fileio import make_dirs, write_json
from attnlab.families.series import (VARIANTS, SeriesExperimentConfig, SeriesSplits, baselines, build_series_model,
                                     make_splits, mse)
from attnlab.runs.workflow import load_run, train

log = logging.getLogger("attnlab")


def train_series(cfg: SeriesExperimentConfig, run_dir: Path | str, seed: int,
                 splits: SeriesSplits | None = None, quiet: bool = False) -> dict:
    """Trains one model through the run pipeline into run_dir (replacing an earlier series run there) and returns
    {seed, train_mse, dev_mse, test_mse, steps, seconds} of the last or the best (lowest dev MSE) weights, as
    cfg.series.select says. quiet: the pipeline's and trainer's messages are not logged (metrics.jsonl has
    them all)."""
    run_dir = Path(run_dir)
    if (run_dir / "metrics.jsonl").is_file():  # an earlier run of this command; the trainer would append to it
        log.warning("replacing %s, trained by an earlier study (choose another --out to keep it)", run_dir)
        shutil.rmtree(run_dir)
    splits = splits or make_splits(cfg.series)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=seed))
    t0 = time.perf_counter()
    level = log.level
    if quiet:
        log.setLevel(logging.WARNING)
    try:
        state = train(cfg, run_dir)
    finally:
        log.setLevel(level)
    model = load_run(run_dir, cfg.series.select, "cpu").model
    return {"seed": seed, "train_mse": mse(model, splits.train), "dev_mse": mse(model, splits.dev),
            "test_mse": mse(model, splits.test), "steps": state.step, "seconds": time.perf_counter() - t0}


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def compare(cfg: SeriesExperimentConfig, seeds: list[int], out: Path | str, variants: tuple[bool, ...] = (False, True),
            log=print) -> dict:
    """Trains the model without and with attention for every seed (same data, same split) and summarizes the
    test MSE. Writes out/results.json; returns it."""
    out = Path(out)
    splits = make_splits(cfg.series)
    results: dict = {"task": cfg.series.task, "config": dataclasses.asdict(cfg), "baselines": baselines(splits),
                     "models": {}}
    names = {attention: name for name, attention in VARIANTS.items()}
    for attention in variants:
        name = names[attention]
        mcfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, attention=attention))
        runs = []
        for seed in seeds:
            r = train_series(mcfg, out / name / f"seed{seed}", seed, splits, quiet=True)
            log(f"{cfg.series.task} {name:9s} seed {seed}: test MSE {r['test_mse']:.4e} "
                f"(train {r['train_mse']:.3e}; {r['steps']} steps, {r['seconds']:.1f} s)")
            runs.append(r)
        m, s = mean_std([r["test_mse"] for r in runs])
        params = sum(p.numel() for p in build_series_model(mcfg).parameters())
        results["models"][name] = {"params": params, "test_mse_mean": m, "test_mse_std": s, "runs": runs}
    if len(variants) == 2:
        rnn, att = (results["models"][names[attention]] for attention in (False, True))
        wins = sum(a["test_mse"] < r["test_mse"] for a, r in zip(att["runs"], rnn["runs"]))
        results["claim"] = {"statement": "the test MSE is lower with the attention layer",
                            "holds_on_mean": att["test_mse_mean"] < rnn["test_mse_mean"],
                            "attention_lower_in_seeds": wins, "seeds": len(seeds)}
    make_dirs(out)
    write_json(out / "results.json", results)
    return results


def format_comparison(results: dict) -> str:
    """The table of a `compare` result: per model, params and test MSE mean +/- std; and the claim's check."""
    lines = [f"task {results['task']}: test MSE over {len(next(iter(results['models'].values()))['runs'])} seeds "
             f"(mean +/- sample std)"]
    for name, m in results["models"].items():
        lines.append(f"  {name:9s} {m['params']:4d} params   {m['test_mse_mean']:.4e} +/- {m['test_mse_std']:.4e}")
    lines.append("  baselines without a model: " + ", ".join(f"{k} {v:.4e}" for k, v in results["baselines"].items()))
    c = results.get("claim")
    if c:
        verdict = "holds" if c["holds_on_mean"] else "does not hold"
        lines.append(f"seed's claim ({c['statement']}): {verdict} on the mean; attention lower in "
                     f"{c['attention_lower_in_seeds']} of {c['seeds']} seeds")
    return "\n".join(lines)
