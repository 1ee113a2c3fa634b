"""docs/architecture.md's flows, held true: each command the diagram "From a config to a trained run and a
translation" draws goes through the functions it names. Each test wraps those functions with a recorder (where the
module that calls them looks them up) and runs the command as a user types it."""

import json

import pytest

import attnlab.app.api as api
import attnlab.families.table as table
import attnlab.runs.run as run_module
import attnlab.runs.workflow as workflow
from attnlab.app.cli import main
from attnlab.decode.translate import Translator


@pytest.fixture
def calls(monkeypatch):
    """record(obj, name): wraps obj.name so that each call appends name to the returned list."""
    seen: list[str] = []

    def record(obj, name: str, label: str | None = None) -> None:
        original = getattr(obj, name)

        def wrapped(*args, **kwargs):
            seen.append(label or name)
            return original(*args, **kwargs)

        monkeypatch.setattr(obj, name, wrapped)

    return seen, record


def test_train_reads_and_types_the_config_once(tiny_tsv, tmp_path, calls, capsys):
    seen, record = calls
    record(table, "read_config_file")
    record(run_module, "load_family_config")
    record(run_module, "train_run", "workflow.train")
    config = tmp_path / "c.toml"
    config.write_text(f'[data]\ncorpus = "files"\ntrain = ["{tiny_tsv}/train.tsv"]\ndev = ["{tiny_tsv}/dev.tsv"]\n'
                      f'test = ["{tiny_tsv}/test.tsv"]\n[tokenizer]\nkind = "char"\n[model.rnn]\nemb_dim = 8\n'
                      'hidden_dim = 8\n[train]\nmax_steps = 2\neval_every = 2\nprogress = false\n'
                      'eval_max_sentences = 2\n')
    assert main(["train", str(config), "--out", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    assert seen == ["load_family_config", "read_config_file", "workflow.train"]


def test_evaluate_goes_through_run_evaluate(tiny_runs, calls, capsys):
    seen, record = calls
    record(run_module.Run, "evaluate", "Run.evaluate")
    record(run_module, "evaluate_run", "workflow.evaluate_run")
    assert main(["evaluate", str(tiny_runs["rnn"]), "--beam", "1", "--max-sentences", "3", "--json"]) == 0
    assert "bleu" in json.loads(capsys.readouterr().out)
    assert seen == ["Run.evaluate", "workflow.evaluate_run"]


@pytest.mark.parametrize("name", ["rnn", "transformer"])
def test_translate_goes_through_the_runs_one_translator(tiny_runs, calls, capsys, tmp_path, name, monkeypatch):
    seen, record = calls
    record(run_module, "load_run", "workflow.load_run")
    record(Translator, "translate", "Translator.translate")
    src = tmp_path / "in.txt"
    src.write_text("the cat\n")
    assert main(["translate", str(tiny_runs[name]), str(src), "--beam", "1"]) == 0, \
        capsys.readouterr().err
    assert seen[0] == "workflow.load_run" and set(seen[1:]) == {"Translator.translate"}


def test_report_translates_with_run_translator(tiny_runs, calls, tmp_path, capsys, monkeypatch):
    seen, record = calls
    record(run_module, "load_run", "workflow.load_run")
    translator = run_module.Run.translator  # a property: wrapped as one

    def recorded(self):
        seen.append("Run.translator")
        return translator.fget(self)

    monkeypatch.setattr(run_module.Run, "translator", property(recorded))
    record(Translator, "translate", "Translator.translate")
    assert main(["report", str(tiny_runs["rnn"]), "--out", str(tmp_path / "r.html"), "--samples", "1"]) == 0, \
        capsys.readouterr().err
    assert seen[:2] == ["workflow.load_run", "Run.translator"] and seen.count("workflow.load_run") == 1
    assert "Translator.translate" in seen


def test_plot_explore_goes_through_run_explore(tiny_runs, calls, tmp_path, capsys):
    seen, record = calls
    record(run_module.Run, "explore", "Run.explore")
    record(run_module, "explore_run", "explore.explore_run")
    assert main(["plot", "explore", str(tiny_runs["transformer"]), "--sentence", "the cat", "--out",
                 str(tmp_path / "x"), "--formats", "svg"]) == 0, capsys.readouterr().err
    assert seen == ["Run.explore", "explore.explore_run"]


def test_export_and_summary_go_through_the_pipeline(tiny_runs, calls, tmp_path, capsys):
    seen, record = calls
    record(workflow, "export_run", "workflow.export_run")
    record(workflow, "summary", "workflow.summary")
    assert main(["export", str(tiny_runs["rnn"]), "--to", "attnlab", "--out", str(tmp_path / "c")]) == 0, \
        capsys.readouterr().err
    assert main(["summary", str(tiny_runs["rnn"])]) == 0, capsys.readouterr().err
    assert seen == ["workflow.export_run", "workflow.summary"]
    assert api.workflow is workflow  # the API calls the pipeline module itself, which the recorder wrapped
