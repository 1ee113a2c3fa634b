"""`attnlab report`: one self-contained HTML page comparing trained runs.

The page holds, for every run: its resolved config, its per-layer parameter summary (`attnlab.core.summary`), the
training curves (metrics.jsonl), the BLEU/chrF table and BLEU by source length (from eval/<split>.json, written
by `attnlab evaluate`), and sample translations of the same source sentences, each with its cross-attention
heatmap. Figures are matplotlib PNGs inlined as base64 data URIs and the CSS is inline: the file can be mailed
or opened offline, it loads nothing.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from attnlab.core.config import to_dict
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text, read_json
from attnlab.core.logs import read_metrics
from attnlab.core.metrics import format_length_table
from attnlab.core.plotting import plot_attention, plot_attention_grid, plot_bleu_by_length, plot_curves
from attnlab.core.summary import format_table, layer_table
from attnlab.data.corpus import normalize
from attnlab.data.tokenizers import TokenizerPair
from attnlab.decode.translate import Translator
from attnlab.families.table import explorer
from attnlab.families.translation import ExperimentConfig, split_pairs
from attnlab.runs.run import load

log = logging.getLogger("attnlab")


@dataclass
class RunInfo:
    name: str
    path: Path
    cfg: ExperimentConfig
    translator: Translator
    attention: str  # the model's attention with its sizes (the family's `Explorer.facts`)
    summary: str  # the `attnlab summary` table
    parameters: int
    records: list[dict]  # metrics.jsonl
    eval: dict | None  # eval/<split>.json, None when not evaluated
    samples: list = field(default_factory=list)  # Translation per sample sentence


@dataclass
class Sample:
    src: str
    ref: str = ""  # reference translation, when the sentence comes from the corpus
    label: str = ""  # e.g. the verse reference


def load_run_info(run_dir: Path, name: str, split: str, checkpoint: str = "best", device: str = "cpu") -> RunInfo:
    """Everything the report shows about one run, except its sample translations."""
    run = load(run_dir, checkpoint, device)  # the one way to a translator: Run
    run.require("translate")
    loaded = run.loaded
    cfg, tokenizers, model = loaded.cfg, loaded.tokenizers, loaded.model
    inputs, description = loaded.family.summary_inputs(cfg, tokenizers, 7, 6)
    rows = layer_table(model, *inputs)
    summary = format_table(rows, f"{loaded.family.title}, {description}")
    records = read_metrics(run_dir)
    ev = run_dir / "eval" / f"{split}.json"
    attention = explorer(loaded.family, run_dir).facts(loaded).description
    return RunInfo(name, run_dir, cfg, run.translator, attention, summary, sum(r.params for r in rows), records,
                   read_json(ev) if ev.is_file() else None)


def default_samples(cfg: ExperimentConfig, split: str, n: int, tokenizers: TokenizerPair | None = None,
                    max_words: int = 20) -> list[Sample]:
    """n sentences of the run's corpus split, evenly spread over it, of at most max_words source words."""
    pairs = [p for p in split_pairs(cfg, split, tokenizers) if len(p.src.split()) <= max_words]
    step = max(1, len(pairs) // max(n, 1))
    return [Sample(p.src, p.tgt, p.ref) for p in pairs[::step][:n]]


def _png(draw: Callable[[Path], object]) -> str:
    """A figure drawn by draw(path) as a data: URI (the temporary file is removed)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "figure.png"
        draw(path)
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def heatmap_uri(t) -> str | None:
    """The cross-attention heatmap of a Translation: RNN (T, S) as one map, Transformer (T, L, H, S) as the grid
    of heads of the last decoder layer (what `attnlab plot attention` draws by default)."""
    if t.attention is None:
        return None
    att = t.attention.numpy()
    if att.ndim == 2:
        return _png(lambda p: plot_attention(att, t.src_tokens, t.tgt_tokens, p))
    last = att[:, -1]  # (T, H, S)
    heads = [last[:, h] for h in range(last.shape[1])]  # H x (T, S)
    names = [f"layer {att.shape[1]} head {h + 1}" for h in range(len(heads))]
    return _png(lambda p: plot_attention_grid(heads, t.src_tokens, t.tgt_tokens, p, names, ncols=min(len(heads), 2)))


# ---------------------------------------------------------------------------------------------- html
CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2.5em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .6em 0; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; font-size: .8em; }
img { max-width: 100%; } .muted { color: #777; } code { background: #f3f3f3; padding: 0 .2em; }
.sample { border: 1px solid #ddd; border-radius: 6px; padding: .6em 1em; margin: 1em 0; }
.hyps { display: grid; grid-template-columns: repeat(auto-fit, minmax(380px, 1fr)); gap: 1em; }
"""


def _e(x) -> str:
    return html.escape(str(x))


def _fmt(x, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) else "-"


def _runs_table(runs: list[RunInfo]) -> str:
    head = ("<tr><th>run</th><th>path</th><th>family</th><th>attention</th><th>parameters</th><th>steps</th>"
            "<th>best dev BLEU (greedy)</th><th>last dev loss</th></tr>")
    rows = []
    for r in runs:
        steps = max((x.get("step", 0) for x in r.records), default=0)
        bleus = [x["bleu"] for x in r.records if "bleu" in x]
        dev_losses = [x["dev_loss"] for x in r.records if "dev_loss" in x]
        rows.append(f"<tr><td>{_e(r.name)}</td><td><code>{_e(r.path)}</code></td><td>{_e(r.cfg.model.family)}</td>"
                    f"<td>{_e(r.attention)}</td><td class=num>{r.parameters:,}</td><td class=num>{steps:,}</td>"
                    f"<td class=num>{_fmt(max(bleus) if bleus else None)}</td>"
                    f"<td class=num>{_fmt(dev_losses[-1] if dev_losses else None, 3)}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _scores_table(runs: list[RunInfo], split: str) -> str:
    head = (f"<tr><th>run</th><th>{_e(split)} BLEU</th><th>chrF</th><th>sentences</th><th>beam</th>"
            "<th>checkpoint</th><th>sacrebleu signature</th></tr>")
    rows, missing = [], []
    for r in runs:
        ev = r.eval
        if ev is None:
            missing.append(r)
            continue
        rows.append(f"<tr><td>{_e(r.name)}</td><td class=num>{_fmt(ev['bleu'])}</td><td class=num>{_fmt(ev['chrf'])}"
                    f"</td><td class=num>{ev['sentences']:,}</td><td class=num>{ev['beam']}</td>"
                    f"<td>{_e(ev.get('checkpoint', ''))}</td>"
                    f"<td><code>{_e(ev.get('bleu_signature', ''))}</code></td></tr>")
    out = f"<table>{head}{''.join(rows)}</table>" if rows else ""
    for r in missing:
        out += (f"<p class=muted>{_e(r.name)}: not evaluated on {_e(split)} yet; run "
                f"<code>attnlab evaluate {_e(r.path)} --split {_e(split)}</code> and build the report again.</p>")
    return out


def _sample_html(i: int, sample: Sample, runs: list[RunInfo]) -> str:
    parts = [f"<div class=sample><h3>{i + 1}. {_e(sample.label)}</h3>",
             f"<p><b>source:</b> {_e(sample.src)}</p>"]
    if sample.ref:
        parts.append(f"<p><b>reference:</b> {_e(sample.ref)}</p>")
    parts.append("<div class=hyps>")
    for r in runs:
        t = r.samples[i]
        uri = heatmap_uri(t)
        img = (f"<img alt='attention of {_e(r.name)}' src='{uri}'>" if uri
               else "<p class=muted>no attention (attention = none)</p>")
        parts.append(f"<div><p><b>{_e(r.name)}:</b> {_e(t.text)}</p>{img}</div>")
    parts.append("</div></div>")
    return "".join(parts)


def render_html(runs: list[RunInfo], samples: list[Sample], split: str, beam: int | None,
                samples_note: str = "") -> str:
    """The report page. Every run's `samples` holds its Translation of each sample, in order."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
           f"<title>attnlab report: {_e(', '.join(r.name for r in runs))}</title><style>{CSS}</style></head><body>",
           f"<h1>attnlab report: {_e(', '.join(r.name for r in runs))}</h1>",
           f"<p class=muted>written {now} by attnlab {_e(__import__('attnlab').__version__)}</p>",
           "<h2>Runs</h2>", _runs_table(runs),
           "<h2>Translation quality</h2>", _scores_table(runs, split)]
    with_records = {r.name: r.records for r in runs if r.records}
    if with_records:
        out += ["<h2>Training curves</h2>",
                f"<img alt='training curves' src='{_png(lambda p: plot_curves(with_records, p))}'>"]
    evaluated = {r.name: r.eval["by_length"] for r in runs if r.eval and r.eval.get("by_length")}
    if evaluated:
        uri = _png(lambda p: plot_bleu_by_length(evaluated, p, title=f"{split} BLEU by source length"))
        out += [f"<h2>{_e(split)} BLEU by source length</h2>", f"<img alt='BLEU by length' src='{uri}'>"]
        out += [f"<details><summary>{_e(name)}: table</summary><pre>{_e(format_length_table(rows))}</pre></details>"
                for name, rows in evaluated.items()]
    beam_text = f"beam {beam}" if beam else "each run's decode.beam_size"
    out.append(f"<h2>Sample translations ({_e(beam_text)})</h2>")
    out.append("<p class=muted>Heatmaps: one row per output token, one column per source token; Transformers: "
               "every head of the last decoder layer.</p>")
    if samples_note:
        out.append(f"<p class=muted>{_e(samples_note)}</p>")
    out += [_sample_html(i, s, runs) for i, s in enumerate(samples)]
    out.append("<h2>Configs and parameter summaries</h2>")
    for r in runs:
        cfg_json = json.dumps(to_dict(r.cfg), indent=2)
        out.append(f"<h3>{_e(r.name)}</h3><details><summary>config ({_e(r.path / 'config.json')})</summary>"
                   f"<pre>{_e(cfg_json)}</pre></details><details><summary>parameter summary: {r.parameters:,} "
                   f"parameters</summary><pre>{_e(r.summary)}</pre></details>")
    out.append("</body></html>\n")
    return "\n".join(out)


def build_report(run_dirs: list[Path], out: Path, split: str = "test", n_samples: int = 4,
                 sentences: list[str] | None = None, beam: int | None = None, checkpoint: str = "best",
                 device: str = "cpu") -> Path:
    """Writes the report of run_dirs to out (HTML) and returns its path.

    Samples: `sentences` when given, else n_samples sentences of the first run's `split` (with references).
    """

    if not run_dirs:
        raise AttnlabError("give at least one run directory")
    if n_samples < 0:
        raise AttnlabError(f"--samples must be >= 0, got {n_samples}")
    runs: list[RunInfo] = []
    for run in map(Path, run_dirs):
        name = run.name if run.name not in {r.name for r in runs} else str(run)
        runs.append(load_run_info(run, name, split, checkpoint, device))
    note = ""
    if sentences:
        samples = [Sample(normalize(s), label="your sentence") for s in sentences if normalize(s)]
        if not samples:
            raise AttnlabError("--sentence is empty")
    else:
        try:
            samples = default_samples(runs[0].cfg, split, n_samples, runs[0].translator.tokenizers)
        except AttnlabError as e:  # the run's corpus is gone (moved files, no SWORD modules): report the rest
            samples, note = [], f"no sample translations: the corpus of {runs[0].name} could not be read ({e})"
            log.warning("attnlab report: %s", note)
    for r in runs:
        r.samples = [n[0] for n in r.translator.translate([s.src for s in samples], beam_size=beam,
                                                          need_weights=True)] if samples else []
    text = render_html(runs, samples, split, beam, note)
    out = Path(out)
    atomic_write_text(out, text)
    return out
