"""Compact runs (`attnlab export RUN --to attnlab`) and the trained models that ship with attnlab
(`attnlab.runs.shipped`): int8 weights with a scale per row within half a step of the original, bf16 weights equal
to torch's own rounding, float32 exact; `pretrained:NAME` wherever a run directory goes; and, where the package
holds them, the shipped models themselves."""

import json
import shutil
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnlab.app.cli import main
from attnlab.app.server import LengthScore
from attnlab.core.config import read_config_file
from attnlab.core.checkpoint import SCALE_SUFFIX, load_weights, quantize_int8, save_weights
from attnlab.core.errors import AttnlabError
from attnlab.families.translation import experiment_from_dict
from attnlab.runs import shipped
from attnlab.runs.workflow import load_run

RUTH_1_3 = "And Elimelech Naomi's husband died; and she was left, and her two sons."


def test_int8_rows_round_to_the_nearest_step():
    w = torch.randn(7, 3, 5, generator=torch.Generator().manual_seed(0)) * torch.arange(1, 8)[:, None, None]
    w[3] = 0.0  # an all-zero row
    q, scale = quantize_int8(w)
    assert q.dtype == torch.int8 and q.shape == w.shape and scale.shape == (7,)
    step = w.reshape(7, -1).abs().max(dim=1).values / 127  # independent: the symmetric per-row step
    assert torch.allclose(scale[[0, 1, 2, 4, 5, 6]], step[[0, 1, 2, 4, 5, 6]])
    assert int(q.abs().max()) == 127 and int(q[3].abs().max()) == 0
    back = q.float() * scale[:, None, None]
    assert bool(((back - w).abs() <= scale[:, None, None] / 2 + 1e-7).all())


@pytest.mark.parametrize("quantization", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_a_compact_run_loads_what_was_stored(tiny_runs, tmp_path, capsys, family, quantization):
    out = tmp_path / f"{family}-{quantization}"
    assert main(["export", str(tiny_runs[family]), "--to", "attnlab", "--quantization", quantization,
                 "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert {p.name for p in out.iterdir()} <= set(shipped.COMPACT_ENTRIES)
    original, compact = load_run(tiny_runs[family]), load_run(out)
    ours = original.model.state_dict()
    for name, t in compact.model.state_dict().items():
        ref = ours[name].float()
        if quantization == "float32":
            assert torch.equal(t, ours[name]), name
        elif quantization == "bfloat16" or ref.dim() < 2:
            assert torch.equal(t, ref.to(torch.bfloat16).float()), name  # torch's own rounding
        else:
            rows = ref.reshape(ref.shape[0], -1)
            step = rows.abs().max(dim=1).values.clamp(min=1e-30)[:, None] / 127
            assert bool(((t.reshape(rows.shape) - rows).abs() <= step / 2 + 1e-6).all()), name
            assert torch.allclose(t.reshape(rows.shape), torch.round(rows / step) * step, atol=1e-6), name
    # the stored file really is compact: int8 matrices, no float32 left
    weights = next((out / "checkpoints").glob("step_*.safetensors"))
    dtypes = {t.dtype for t in load_file(str(weights)).values()}
    expected = {"float32": {torch.float32}, "bfloat16": {torch.bfloat16},
                "int8": {torch.int8, torch.bfloat16, torch.float32}}[quantization]
    assert dtypes <= expected and (quantization != "int8" or torch.int8 in dtypes)
    card = json.loads((out / "card.json").read_text())
    assert card["quantization"] == quantization and card["parameters"] == sum(
        p.numel() for p in original.model.parameters())
    assert "## Use" in (out / "README.md").read_text()
    # every command takes it: translate
    (tmp_path / "in.txt").write_text("a b c\n")
    assert main(["translate", str(out), str(tmp_path / "in.txt"), "--beam", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_tied_weights_stay_tied_in_int8(tmp_path):
    lin = torch.nn.Sequential(torch.nn.Embedding(11, 6), torch.nn.Linear(6, 11, bias=False))
    lin[1].weight = lin[0].weight
    save_weights(lin, tmp_path / "w.safetensors", quantization="int8")
    stored = load_file(str(tmp_path / "w.safetensors"))
    assert sorted(stored) == ["0.weight", "0.weight.int8_scale"]
    other = torch.nn.Sequential(torch.nn.Embedding(11, 6), torch.nn.Linear(6, 11, bias=False))
    load_weights(other, tmp_path / "w.safetensors")
    assert torch.equal(other[0].weight, other[1].weight)


def test_a_bad_quantization_record_is_one_line(tmp_path):
    model = torch.nn.Linear(4, 3)
    save_file({"weight": torch.zeros(3, 4, dtype=torch.int8), "bias": torch.zeros(3)}, str(tmp_path / "w.safetensors"),
              metadata={"attnlab_quantization": json.dumps({"kind": "int8", "int8": ["weight"]})})
    with pytest.raises(AttnlabError, match="int8_scale"):
        load_weights(model, tmp_path / "w.safetensors")
    save_file({"weight": torch.zeros(3, 4)}, str(tmp_path / "v.safetensors"),
              metadata={"attnlab_quantization": "{not json"})
    with pytest.raises(AttnlabError, match="attnlab_quantization"):
        load_weights(model, tmp_path / "v.safetensors")


@pytest.fixture
def fake_package(tiny_runs, tmp_path, monkeypatch):
    """A package `trained/` folder holding one compact run, "tiny" (the tiny Transformer in int8)."""
    trained = tmp_path / "trained"
    assert main(["export", str(tiny_runs["transformer"]), "--to", "attnlab", "--quantization", "int8",
                 "--out", str(trained / "tiny")]) == 0
    monkeypatch.setattr(shipped, "trained_folder", lambda: trained)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    return trained


def test_pretrained_names_work_where_run_directories_go(fake_package, tmp_path, capsys):
    capsys.readouterr()
    assert main(["pretrained"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["NAME", "FAMILY"] and out.splitlines()[1].split()[:2] == [
        "tiny", "transformer"]
    assert main(["pretrained", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "tiny"
    (tmp_path / "in.txt").write_text("a b c\nd e\n")
    assert main(["translate", "pretrained:tiny", str(tmp_path / "in.txt"), "--beam", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    copies = list((tmp_path / "cache" / "pretrained").iterdir())
    assert len(copies) == 1 and copies[0].name.startswith("tiny-")
    before = copies[0].stat().st_mtime_ns
    import attnlab
    assert attnlab.load("pretrained:tiny").translate("a b c") is not None
    assert copies[0].stat().st_mtime_ns == before  # reused, not copied again
    assert not list(fake_package.rglob("eval/*.hyp.txt"))  # nothing written into the package
    assert main(["evaluate", "pretrained:tiny", "--max-sentences", "3"]) == 0
    assert not list(fake_package.rglob("*.hyp.txt")) and list(copies[0].rglob("*.hyp.txt"))
    assert main(["plot", "curves", "pretrained:tiny", "--out", str(tmp_path / "curves.png")]) == 0  # the names too
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_an_unknown_pretrained_name_lists_the_shipped_ones(fake_package, capsys):
    capsys.readouterr()
    assert main(["translate", "pretrained:nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "choose one of: tiny" in err


# ------------------------------------------------------------------------------------- the shipped models
SHIPPED = shipped.shipped_names()


@pytest.mark.skipif(not SHIPPED, reason="this checkout has no shipped models (src/attnlab/trained)")
@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_model_translates_ruth_1_3(name, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    import attnlab
    run = attnlab.load(f"pretrained:{name}")
    text = run.translate(RUTH_1_3)
    words = str(getattr(text, "text", text)).split()
    assert len(words) >= 5 and len(set(words)) >= 4, words  # a real sentence, not empty or one token repeated
    card = json.loads((shipped.trained_folder() / name / "card.json").read_text())
    assert card["bleu"]["kjv"] > 5 and card["bleu"]["web"] > 5


def test_a_shipped_model_is_fine_tuned_by_name(fake_package, tiny_tsv, tmp_path, capsys):
    cfg = tmp_path / "ft.json"
    cfg.write_text(json.dumps({
        "data": {"corpus": "files", "train": [str(tiny_tsv / "train.tsv")], "dev": [str(tiny_tsv / "dev.tsv")],
                 "test": [str(tiny_tsv / "test.tsv")]},
        "train": {"max_steps": 2, "max_tokens": 400, "eval_every": 2, "progress": False, "eval_max_sentences": 4}}))
    assert main(["train", str(cfg), "--init", "pretrained:tiny", "--out", str(tmp_path / "ft")]) == 0
    init = json.loads((tmp_path / "ft" / "config.json").read_text())["pretrained"]["init"]
    assert init.startswith(str(tmp_path / "cache" / "pretrained" / "tiny-"))


def test_many_first_uses_at_once_make_one_copy_and_all_load(fake_package, tmp_path):
    """A class sharing one cache, starting together: 8 first uses at the same moment each get a complete copy that
    loads (none is moved away under another's feet), and one copy is left, with no temporary folders."""
    import threading

    from attnlab.runs.workflow import load_run as load

    start, errors, done = threading.Barrier(8), [], []

    def first_use():
        try:
            start.wait()
            run = load(shipped.shipped_run("tiny"))
            done.append(sum(p.numel() for p in run.model.parameters()))
        except Exception as e:  # collected: a thread's exception would not fail the test
            errors.append(repr(e))

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(done) == 8
    left = sorted(p.name for p in (tmp_path / "cache" / "pretrained").iterdir())
    assert len(left) == 1 and left[0].startswith("tiny-"), left


def test_a_damaged_cache_copy_is_replaced_and_a_planted_link_refused(fake_package, tmp_path, capsys):
    first = shipped.shipped_run("tiny")
    (first / "config.json").unlink()  # damaged: the copy is made again
    assert shipped.shipped_run("tiny") == first and (first / "config.json").is_file()
    shutil.rmtree(first)
    (tmp_path / "elsewhere").mkdir()
    first.symlink_to(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["translate", "pretrained:tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "symlink" in err and not list((tmp_path / "elsewhere").iterdir())


def test_a_cache_copy_with_other_weights_is_copied_again(fake_package):
    """The cache copy of a shipped model is checked against the package's bytes on every load (issue 47): zeroed
    weights in the cache are not used, the package's come back."""
    first = shipped.shipped_run("tiny")
    weights = next((first / "checkpoints").glob("step_*.safetensors"))
    tensors = load_file(str(weights))
    save_file({k: torch.zeros_like(v) for k, v in tensors.items()}, str(weights))
    again = shipped.shipped_run("tiny")
    assert again == first
    package = next((shipped.trained_folder() / "tiny" / "checkpoints").glob("step_*.safetensors"))
    assert weights.read_bytes() == package.read_bytes()


@pytest.mark.parametrize("scale", [0.0, -1.0, 1e30, float("inf"), float("nan")])
def test_int8_scales_the_writer_never_writes_are_refused(tiny_runs, tmp_path, capsys, scale):
    out = tmp_path / "compact"
    assert main(["export", str(tiny_runs["rnn"]), "--to", "attnlab", "--quantization", "int8", "--out", str(out)]) == 0
    weights = next((out / "checkpoints").glob("step_*.safetensors"))
    from safetensors import safe_open
    with safe_open(str(weights), framework="pt") as f:
        meta = f.metadata()
    tensors = load_file(str(weights))
    name = next(k for k in tensors if k.endswith(SCALE_SUFFIX))
    tensors[name] = tensors[name].clone()
    tensors[name][0] = scale
    save_file(tensors, str(weights), metadata=meta)
    capsys.readouterr()
    (tmp_path / "in.txt").write_text("a b c\n")
    assert main(["translate", str(out), str(tmp_path / "in.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "scale" in err, err


@pytest.mark.skipif(not SHIPPED, reason="this checkout has no shipped models (src/attnlab/trained)")
@pytest.mark.parametrize("name", SHIPPED)
def test_each_card_shows_what_its_model_translates_for_the_showcase_verses(name, tmp_path, monkeypatch):
    """The card's showcase (issue 46, item 3) is the model's own output: every SHOWCASE verse, in order, translated
    again here to the same text, its chrF the sentence chrF of that text against the card's reference; the README
    shows the table and the BLEU by source length."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    import sacrebleu

    import attnlab
    folder = shipped.trained_folder() / name
    card = json.loads((folder / "card.json").read_text())
    rows = card["showcase"]
    assert [r["ref"] for r in rows] == list(shipped.SHOWCASE)
    run = attnlab.load(f"pretrained:{name}")
    assert run.translate([r["source"] for r in rows]) == [r["output"] for r in rows]
    for r in rows:
        assert abs(sacrebleu.sentence_chrf(r["output"], [r["reference"]]).score - r["chrf"]) < 0.051
    readme = (folder / "README.md").read_text()
    assert "## The verses a class types first" in readme and "| John 11:35 |" in readme
    assert "BLEU by source length" in readme and "31+" in readme


@pytest.mark.skipif(not SHIPPED, reason="this checkout has no shipped models (src/attnlab/trained)")
@pytest.mark.parametrize("name", SHIPPED)
def test_each_card_holds_the_bleu_by_length_of_its_shipped_evaluation(name):
    """card.json's by_length (the compare view's chart, issue 46) is the package's eval/test.json rows, to 0.01."""
    folder = shipped.trained_folder() / name
    card = json.loads((folder / "card.json").read_text())
    evaluation = json.loads((folder / "eval" / "test.json").read_text())
    assert [(r["bucket"], r["sentences"]) for r in card["by_length"]] == [
        (r["bucket"], r["sentences"]) for r in evaluation["by_length"]]
    assert all(abs(c["bleu"] - e["bleu"]) <= 0.005 for c, e in zip(card["by_length"], evaluation["by_length"]))


def test_the_compare_view_keeps_the_cards_figures_when_the_cache_copy_is_evaluated(tiny_runs, tmp_path, monkeypatch):
    """A shipped model's BLEU by length in the compare view (`shipped.length_scores`) comes from its card: a
    partial evaluation of its copy in the cache (which rewrites eval/test.json there) does not change it, and a
    copy whose card is not the package's (an older attnlab's) is copied again."""
    def bleu_by_length(run_dir):
        return [LengthScore(**r) for r in shipped.length_scores(run_dir)]  # what the compare view's JSON carries

    run = tmp_path / "run"
    shutil.copytree(tiny_runs["transformer"], run)
    assert main(["evaluate", str(run), "--split", "test", "--beam", "1"]) == 0
    trained = tmp_path / "trained"
    assert main(["export", str(run), "--to", "attnlab", "--quantization", "int8", "--out", str(trained / "tiny")]) == 0
    monkeypatch.setattr(shipped, "trained_folder", lambda: trained)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    card = json.loads((trained / "tiny" / "card.json").read_text())["by_length"]
    shipped_rows = [(r["bucket"], r["sentences"]) for r in card]
    assert sum(n for _, n in shipped_rows) > 2
    copy = shipped.shipped_run("tiny")
    assert [(r.bucket, r.sentences) for r in bleu_by_length(copy)] == shipped_rows
    assert main(["evaluate", "pretrained:tiny", "--split", "test", "--beam", "1", "--max-sentences", "2"]) == 0
    evaluated = json.loads((copy / "eval" / "test.json").read_text())["by_length"]
    assert sum(r["sentences"] for r in evaluated) == 2  # the copy's evaluation changed ...
    assert [(r.bucket, r.sentences) for r in bleu_by_length(copy)] == shipped_rows  # ... the chart did not
    old = json.loads((copy / "card.json").read_text())
    del old["by_length"]  # a copy made by an attnlab whose cards had no by_length
    (copy / "card.json").write_text(json.dumps(old))
    assert shipped.shipped_run("tiny") == copy
    assert [(r.bucket, r.sentences) for r in bleu_by_length(copy)] == shipped_rows
    (run / "card.json").unlink(missing_ok=True)  # a run without a card: its own evaluation
    assert [(r.bucket, r.sentences) for r in bleu_by_length(run)] == shipped_rows


@pytest.mark.parametrize("card", ['{"by_length": [{"bucket": "1-10", "sentences": "many", "bleu": 1}]}',
                                  '{"by_length": 3}', '[1, 2]', '{"by_length": [', '"by_length"'])
def test_a_damaged_card_leaves_the_chart_out_with_a_warning(tmp_path, card, caplog):
    """The compare view reads card.json of any served run (a folder from someone else): rows it never writes, or
    a file that is not JSON, give no BLEU by length and one warning naming the file, never an exception."""
    (tmp_path / "card.json").write_text(card)
    with caplog.at_level("WARNING", logger="attnlab"):
        assert shipped.length_scores(tmp_path) == []
    assert "card.json" in caplog.text


@pytest.mark.parametrize("weights, says", [
    ([1, 2], "at most 50 words; each epoch draws kjv's verses 1 time, web's verses 2 times; attnlab's"),
    ([], "at most 50 words; attnlab's"),
    ([1, 1], "at most 50 words; attnlab's"),
])
def test_a_card_says_how_often_each_rendering_is_drawn(weights, says, tmp_path):
    """The card's data line follows the config: data.english_weights other than all ones are named per rendering."""
    cfg = experiment_from_dict({"data": {"corpus": "bible", "english": ["kjv", "web"], "max_words": 50,
                                         "english_weights": weights}})
    run = SimpleNamespace(cfg=cfg, family=SimpleNamespace(title="Transformer"))
    card = shipped.model_card(run, "t", "int8", 10, 1.0, {}, 5, 1.0, "t", tmp_path)
    assert says in card.replace("\n", " ")


@pytest.mark.skipif(not SHIPPED, reason="this checkout has no shipped models (src/attnlab/trained)")
@pytest.mark.parametrize("name", SHIPPED)
def test_each_package_decodes_as_its_recipe_says_and_its_card_names_it(name):
    """The package's decode settings are configs/pretrained/NAME.toml's [decode] (a length penalty chosen on dev
    reaches the package only by packing it again); its test evaluations were decoded with them and its card says so."""
    folder = shipped.trained_folder() / name
    recipe = read_config_file(f"pretrained/{name}")["decode"]
    decode = json.loads((folder / "config.json").read_text())["decode"]
    assert {key: decode[key] for key in recipe} == recipe
    beam, alpha = decode["beam_size"], decode["length_penalty"]
    for evaluation in sorted((folder / "eval").glob("test*.json")):
        result = json.loads(evaluation.read_text())
        assert (result["beam"], result["length_penalty"]) == (beam, alpha), evaluation.name
    readme = (folder / "README.md").read_text()
    assert f"## Test scores (beam {beam}, length penalty {alpha:g}, sacrebleu)" in readme
    assert f"this model's translation (beam {beam}, length penalty {alpha:g})" in readme


def recipe_keys(recipe: dict, config: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """(key, recipe's value, config's value) for every leaf key the recipe sets."""
    out = []
    for key, want in recipe.items():
        got = config.get(key) if isinstance(config, dict) else None
        if isinstance(want, dict):
            out += recipe_keys(want, got if isinstance(got, dict) else {}, f"{prefix}{key}.")
        else:
            out.append((prefix + key, want, got))
    return out


@pytest.mark.skipif(not SHIPPED, reason="this checkout has no shipped models (src/attnlab/trained)")
@pytest.mark.parametrize("name", SHIPPED)
def test_each_package_was_trained_with_its_recipe(name):
    """The package's data, tokenizer and model are configs/pretrained/NAME.toml's, key for key: a recipe changed
    without its model being trained and packed again (or the reverse) fails here."""
    recipe = read_config_file(f"pretrained/{name}")
    config = json.loads((shipped.trained_folder() / name / "config.json").read_text())
    for section in ("data", "tokenizer", "model"):
        differ = [(k, want, got) for k, want, got in recipe_keys(recipe[section], config[section], f"{section}.")
                  if want != got]
        assert not differ, differ


def test_a_card_names_the_decoding_its_evaluations_share():
    assert shipped.decoding([{"beam": 5, "length_penalty": 1.0}, {"beam": 5, "length_penalty": 1.0}]) == \
        "beam 5, length penalty 1"
    assert shipped.decoding([{"beam": 5, "length_penalty": 0.6}, {"beam": 5}]) == "beam 5"  # one written before
    assert shipped.decoding([{"beam": 5}, {"beam": 4}]) == "the run's decode settings"
    assert shipped.decoding([]) == "the run's decode settings"
