"""`attnlab report` on two tiny trained runs: one self-contained page (every figure an inlined PNG, nothing
loaded from elsewhere) whose scores, translations and parameter counts are those of the runs."""

import base64
import html
import shutil
from html.parser import HTMLParser

import pytest

from attnlab import load
from attnlab.app.cli import main
from attnlab.app.report import build_report
from attnlab.core.checkpoint import read_json
from attnlab.families.translation import experiment_from_dict
from attnlab.runs.workflow import load_run

pytestmark = pytest.mark.usefixtures("single_thread")  # tiny models: see conftest.one_thread


class Assets(HTMLParser):
    """Every URL-bearing attribute and every tag of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.urls += [(tag, k, v) for k, v in attrs if k in ("src", "href", "srcset", "data", "action")]


def _parse(text: str) -> Assets:
    p = Assets()
    p.feed(text)
    return p


@pytest.fixture(scope="module")
def tiny_runs(tiny_runs, tmp_path_factory):
    """This module's copies of the session's runs: the report evaluates the RNN run (writing its eval/), which the
    other modules must not see, and expects the Transformer run unevaluated, whatever the other modules did."""
    root = tmp_path_factory.mktemp("report_runs")
    return {name: shutil.copytree(run, root / name, ignore=shutil.ignore_patterns("eval"))
            for name, run in tiny_runs.items()}


@pytest.fixture(scope="module")
def report(tiny_runs, tmp_path_factory):
    """The report of both runs, the RNN evaluated on 6 test sentences, the Transformer not at all."""
    load(tiny_runs["rnn"]).evaluate("test", beam=1, max_sentences=6)
    out = build_report([tiny_runs["rnn"], tiny_runs["transformer"]], tmp_path_factory.mktemp("rep") / "r.html",
                       n_samples=2, beam=1)
    return out.read_text(encoding="utf-8")


def test_self_contained(report):
    page = _parse(report)
    assert page.urls, "the page has figures"
    for tag, attr, value in page.urls:
        assert (tag, attr) == ("img", "src") and value.startswith("data:image/png;base64,"), (tag, attr, value[:60])
        assert base64.b64decode(value.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    # curves + BLEU by length (only the RNN is evaluated) + 2 samples x 2 runs with attention
    assert len(page.urls) == 1 + 1 + 2 * 2


def test_contents_are_the_runs(report, tiny_runs):
    ev = read_json(tiny_runs["rnn"] / "eval" / "test.json")
    assert f"<td class=num>{ev['bleu']:.2f}</td><td class=num>{ev['chrf']:.2f}" in report
    assert html.escape(f"attnlab evaluate {tiny_runs['transformer']} --split test") in report  # how to get it
    for name, run in tiny_runs.items():
        model = load_run(run).model
        n = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        assert f"Total params: {n:,}" in report and f"<td class=num>{n:,}</td>" in report
    for key in ('"hidden_dim": 64', '"d_model": 32', '"attention": "bahdanau"'):  # the configs, as JSON
        assert html.escape(key) in report
    # the samples: 2 sentences of the first run's test split, each translated by both runs
    cfg = experiment_from_dict(read_json(tiny_runs["rnn"] / "config.json"))
    test_lines = [line.split("\t") for line in open(cfg.data.test[0], encoding="utf-8").read().splitlines()]
    shown = [(s, t) for s, t in test_lines if f"<b>source:</b> {html.escape(s)}</p>" in report]
    assert len(shown) == 2
    for src, ref in shown:
        assert f"<b>reference:</b> {html.escape(ref)}</p>" in report
        for name, run in tiny_runs.items():
            text = load(run).translator.translate([src], beam_size=1)[0][0].text
            assert f"<b>{name}:</b> {html.escape(text)}</p>" in report


def test_cli_report_sentences(tiny_runs, tmp_path, capsys):
    out = tmp_path / "one.html"
    assert main(["report", str(tiny_runs["transformer"]), "--sentence", "my  cat sees the door",
                 "--sentence", "a red window", "--out", str(out), "--beam", "2"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    text = out.read_text(encoding="utf-8")
    assert "<b>source:</b> my cat sees the door</p>" in text and "<b>source:</b> a red window</p>" in text
    assert text.count("<img") == 1 + 2  # curves, and one heatmap grid per sentence (no eval: no length plot)
    assert "Sample translations (beam 2)" in text


@pytest.mark.parametrize("args, message", [
    (["report", "{tmp}"], "not a run directory"),
    (["report", "{rnn}", "--sentence", "  "], "--sentence is empty"),
    (["report", "{rnn}", "--samples", "-1"], "argument --samples: -1 is below the minimum 0"),
    (["report", "{rnn}", "--sentence", "the cat", "--beam", "0"], "argument --beam: 0 is below the minimum 1"),
])
def test_cli_report_errors(tiny_runs, tmp_path, capsys, args, message):
    args = [a.format(tmp=tmp_path, rnn=tiny_runs["rnn"]) for a in args] + ["--out", str(tmp_path / "x.html")]
    try:
        code = main(args)
    except SystemExit as e:  # the option's range, checked by argparse
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "x.html").exists()
