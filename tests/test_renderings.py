"""Training on several English renderings of the Bible (`data.english = ["kjv", "web"]`) and scoring any of them
(`attnlab evaluate RUN --source web`), on a small Bible of synthetic verses written in the corpus cache's format:
the SWORD modules are not needed, and the counts are known."""

import json
import random
import sys
from collections import Counter

import pytest

from attnlab.app import api
from attnlab.app.cli import main
from attnlab.app.server import served_info
from attnlab.core.errors import AttnlabError
from attnlab.data.bible import bible_split
from attnlab.data.spec import spec_dict, store_key
from attnlab.data.store import format_store_stats
from attnlab.families.translation import experiment_from_dict, prepare_corpus, store_spec
from conftest import make_pairs

pytestmark = pytest.mark.usefixtures("single_thread")

N = {"train": 120, "dev": 8, "test": 9}
MODERN = {"sees": "looks at", "opens": "unlocks"}  # the "web" rendering: the same verse in other words


def _modern(src: str) -> str:
    return " ".join(MODERN.get(w, w) for w in src.split()) + " now"


@pytest.fixture
def bible(tmp_path, monkeypatch):
    """Two cached Bible corpora, kjv and web, of the same verses and targets (web words some verses differently
    and leaves two training verses out, as a rendering may); the cache's reader reads them."""
    rng = random.Random(5)
    verses = []
    for split, n in N.items():
        verses += [(split, s, t) for s, t in make_pairs(n, rng.randint(0, 99))]
    verses = [(split, f"Gen {k + 1}:1", s, t) for k, (split, s, t) in enumerate(verses)]
    files = {}
    for english in ("kjv", "web"):
        rows = [json.dumps({"dropped": 0 if english == "kjv" else 2, "version": 1})]
        for k, (split, ref, src, tgt) in enumerate(verses):
            if english == "web" and k in (3, 4):
                continue
            rows.append(f"{split}\t{ref}\t{src if english == 'kjv' else _modern(src)}\t{tgt}")
        files[english] = tmp_path / f"bible-{english}.tsv"
        files[english].write_text("\n".join(rows) + "\n", encoding="utf-8")
    fake = lambda english="kjv", refresh=False: files[english]  # noqa: E731
    for module in ("attnlab.data.bible", "attnlab.data.spec"):  # the modules that call bible_tsv
        monkeypatch.setattr(sys.modules[module], "bible_tsv", fake)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    return verses


def _config(tmp_path, english, english_weights=(), **train):
    return experiment_from_dict({
        "data": {"corpus": "bible", "english": english, "english_weights": list(english_weights)},
        "tokenizer": {"kind": "char"},
        "model": {"rnn": {"cell": "gru", "emb_dim": 16, "hidden_dim": 32, "attention": "bahdanau"}},
        "train": {"max_steps": 4, "max_tokens": 600, "eval_every": 4, "progress": False, "eval_max_sentences": 4,
                  **train},
        "decode": {"beam_size": 1}})


@pytest.mark.parametrize("value, message", [
    (["kjv", "kjv"], "data: english: ['kjv', 'kjv'] names a rendering twice"),
    ([], "data: english: give at least one English rendering"),
    (["kjv", "asv"], "data: english: 'asv' is not one of 'kjv', 'web'"),
    ("niv", "data: english: 'niv' is not one of 'kjv', 'web'"),
    (3, "data.english: expected"),
])
def test_a_bad_english_is_one_line_naming_the_key(value, message):
    with pytest.raises(AttnlabError) as error:
        experiment_from_dict({"data": {"english": value}})
    assert str(error.value).startswith(message), str(error.value)


def test_one_or_several_renderings_and_the_headline_first():
    assert experiment_from_dict({"data": {"english": "web"}}).data.renderings == ["web"]
    assert experiment_from_dict({"data": {"english": ["web", "kjv"]}}).data.renderings == ["web", "kjv"]
    assert experiment_from_dict({"data": {"corpus": "files", "train": ["x.tsv"]}}).data.renderings == []


def test_each_training_verse_is_a_pair_per_rendering_and_dev_test_are_the_headlines(bible, tmp_path):
    store = prepare_corpus(_config(tmp_path, ["kjv", "web"]))
    m = store.manifest
    assert m["name"] == "bible-kjv+web-es"
    assert m["counts"]["renderings"] == {"kjv": {"train_read": 120, "train": 120, "dev": 8, "test": 9},
                                         "web": {"train_read": 118, "train": 118, "dev": 8, "test": 9}}
    assert m["counts"]["train"] == 238 and m["counts"]["dev"] == 8 and m["counts"]["test"] == 9
    train = store.pairs("train")
    kjv = [(s, t) for split, _, s, t in bible if split == "train"]
    web = [(_modern(s), t) for k, (split, _, s, t) in enumerate(bible) if split == "train" and k not in (3, 4)]
    assert Counter((p.src, p.tgt) for p in train) == Counter(kjv + web)  # one pair per verse and rendering
    assert [p.src for p in store.pairs("test")] == [s for split, _, s, _ in bible if split == "test"]
    stats = format_store_stats(store)
    assert "English rendering kjv: 120 training pairs kept of 120; dev 8, test 9" in stats
    assert "English rendering web: 118 training pairs kept of 118; dev 8, test 9" in stats


def test_the_tokenizer_learns_from_every_rendering(bible, tmp_path):
    """A character only the web rendering has ("k" of "looks", "unlocks": make_pairs' words have none) is in the
    vocabulary of the kjv+web store, not in the kjv-only one's."""
    assert not any("k" in s for _, _, s, _ in bible)
    both = prepare_corpus(_config(tmp_path, ["kjv", "web"])).tokenizers().src
    kjv = prepare_corpus(_config(tmp_path, "kjv")).tokenizers().src
    assert both.decode(both.encode("look")) == "look"
    assert kjv.decode(kjv.encode("look")) != "look"


def test_english_weights_draw_each_renderings_pairs_that_many_times_an_epoch(bible, tmp_path):
    """data.english_weights = [1, 3]: each kjv pair once and each web pair three times an epoch, with their own
    lengths; the store is the one without weights (the same key)."""
    plain, weighted = _config(tmp_path, ["kjv", "web"]), _config(tmp_path, ["kjv", "web"], [1, 3])
    assert store_key(store_spec(weighted)) == store_key(store_spec(plain))
    store = prepare_corpus(weighted)
    base, data = store.train_data(), store.train_data(weighted.data.english_weights)
    assert len(base) == 238 and len(data) == 120 + 3 * 118
    items = [data[i] for i in range(len(data))]
    kjv_train = Counter(s for split, _, s, _ in bible if split == "train")
    src = store.tokenizers().src
    drawn = Counter(src.decode(s) for _, s, _ in items)
    web = [_modern(s) for k, (split, _, s, _) in enumerate(bible) if split == "train" and k not in (3, 4)]
    assert drawn == kjv_train + Counter(web * 3)
    lengths = data.lengths()
    assert [tuple(lengths[i]) for i in range(len(data))] == [(len(s) + 1, len(t) + 1) for _, s, t in items]
    assert store.train_data([1, 1]).__class__ is base.__class__  # no weights: the store's own dataset


@pytest.mark.parametrize("data, message", [
    ({"english": ["kjv", "web"], "english_weights": [1]}, "data: english_weights: [1] needs one weight per"),
    ({"english": ["kjv", "web"], "english_weights": [1, 0]}, "each weight is an integer from 1 to 100"),
    ({"english": ["kjv", "web"], "english_weights": [1, 2.5]}, "data.english_weights"),
    ({"corpus": "files", "train": ["x.tsv"], "english_weights": [2]}, "data: english_weights: [2] needs one"),
])
def test_bad_english_weights_name_the_key(data, message):
    with pytest.raises(AttnlabError) as error:
        experiment_from_dict({"data": data})
    assert message in str(error.value), str(error.value)


def test_a_run_trains_on_weighted_renderings(bible, tmp_path, caplog):
    cfg = _config(tmp_path, ["kjv", "web"], [2, 1])
    with caplog.at_level("INFO", logger="attnlab"):
        api.train(cfg, tmp_path / "run")
    assert "train pairs 358 drawn of 238 (data.english_weights [2, 1])" in caplog.text  # 2 x 120 + 118
    assert json.loads((tmp_path / "run" / "config.json").read_text())["data"]["english_weights"] == [2, 1]
    assert (tmp_path / "run" / "checkpoints" / "latest.json").is_file()


def test_a_single_rendering_keeps_the_store_key_it_had_as_a_string(bible, tmp_path):
    spec = store_spec(_config(tmp_path, "kjv"))
    assert spec.english == ["kjv"] and spec_dict(spec)["english"] == "kjv"
    assert store_key(spec) == store_key(store_spec(_config(tmp_path, ["kjv"])))
    assert store_key(spec) != store_key(store_spec(_config(tmp_path, ["kjv", "web"])))


def test_evaluate_any_rendering_of_a_run(bible, tmp_path, capsys):
    """A run trained on kjv only scores the web test split too (read from the corpus); a run on both is scored
    on each by default; the files are named by source; the server, the summary and the run show the renderings."""
    one, both = tmp_path / "kjv", tmp_path / "both"
    api.train(_config(tmp_path, "kjv"), one)
    api.train(_config(tmp_path, ["kjv", "web"]), both)

    assert main(["evaluate", str(one), "--source", "web", "--json", "--max-sentences", "5"]) == 0
    web = json.loads(capsys.readouterr().out)
    assert (web["source"], web["trained_on"], web["sentences"]) == ("web", ["kjv"], 5)
    assert (one / "eval" / "test.web.json").is_file() and not (one / "eval" / "test.json").exists()
    hyps = (one / "eval" / "test.web.hyp.txt").read_text(encoding="utf-8").splitlines()
    srcs = [p.src for p in bible_split("web", "test")[:5]]
    run = api.load(one)
    assert hyps == run.translate(srcs, beam=1) and all(s.endswith(" now") for s in srcs)

    assert main(["evaluate", str(both), "--json"]) == 0  # each rendering it was trained on, the headline first
    results = json.loads(capsys.readouterr().out)
    assert [r["source"] for r in results] == ["kjv", "web"] and all(r["sentences"] == 9 for r in results)
    assert (both / "eval" / "test.json").is_file() and (both / "eval" / "test.web.json").is_file()
    assert main(["evaluate", str(both)]) == 0
    text = capsys.readouterr().out
    assert "test (kjv source): 9 sentences" in text and "test (web source): 9 sentences" in text

    loaded = api.load(both)
    assert loaded.renderings == ["kjv", "web"] and loaded.facts()["trained_on"] == ["kjv", "web"]
    assert "English source</th><td style='text-align:left'>kjv + web" in loaded._repr_html_()
    assert served_info("both", loaded.loaded, 100).trained_on == ["kjv", "web"]
    assert main(["summary", str(both)]) == 0
    assert "English kjv + web -> Spanish" in capsys.readouterr().out


def test_source_where_it_does_not_apply_is_a_usage_error(bible, tmp_path, tiny_runs, capsys):
    run = tmp_path / "kjv"
    api.train(_config(tmp_path, "kjv"), run)
    assert main(["evaluate", str(tiny_runs["rnn"]), "--source", "web"]) == 2  # a corpus of files
    assert "English renderings are the Bible's; this run's corpus is 'files'" in capsys.readouterr().err
    assert main(["evaluate", str(run), "--source", "web", "--split", "train"]) == 2
    assert "score the dev or test split" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # argparse's usage error
        main(["evaluate", str(run), "--source", "asv"])
    assert exit_.value.code == 2 and "invalid choice: 'asv'" in capsys.readouterr().err


def test_the_demo_scores_the_other_rendering_too(bible, tmp_path, capsys):
    """`attnlab demo` on a KJV config prints the test score from the WEB wording after the KJV one."""
    config = tmp_path / "tiny-demo.json"
    config.write_text(json.dumps({
        "data": {"corpus": "bible", "english": "kjv"}, "tokenizer": {"kind": "char"},
        "model": {"rnn": {"cell": "gru", "emb_dim": 16, "hidden_dim": 32, "attention": "bahdanau"}},
        "train": {"max_steps": 4, "max_tokens": 600, "eval_every": 4, "progress": False, "eval_max_sentences": 4},
        "decode": {"beam_size": 1}}), encoding="utf-8")
    assert main(["demo", "--config", str(config), "--out", str(tmp_path / "demo"), "--procs", "1", "--beam", "1"]) == 0
    out = capsys.readouterr().out
    assert "== attnlab demo: the English (KJV) -> Spanish" in out
    assert "test (kjv source): 9 sentences, beam 1" in out
    assert ("== the same test verses in the WEB wording (not trained on) ==\n"
            "test (web source): 9 sentences, beam 1") in out
    assert (tmp_path / "demo" / "eval" / "test.web.json").is_file()


def test_an_imported_run_claims_no_english_rendering(tiny_runs, tmp_path):
    """A run `attnlab import` made was trained elsewhere: its config's Bible data section is only attnlab's
    default, so neither the server nor `Run` may say what English it was trained on."""
    import json
    import shutil

    from attnlab.runs.run import load
    from attnlab.app.server import served_info

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_runs["transformer"], run_dir)
    cfg = json.loads((run_dir / "config.json").read_text())
    cfg["data"] = {**cfg["data"], "corpus": "bible", "english": ["kjv", "web"], "train": [], "dev": [], "test": []}
    (run_dir / "config.json").write_text(json.dumps(cfg))
    assert load(run_dir).renderings == ["kjv", "web"]
    assert served_info("run", load(run_dir).loaded, 100).trained_on == ["kjv", "web"]
    (run_dir / "imported.json").write_text(json.dumps({"from": "x", "architecture": "MarianMTModel"}))
    assert load(run_dir).renderings == [] and served_info("run", load(run_dir).loaded, 100).trained_on == []
