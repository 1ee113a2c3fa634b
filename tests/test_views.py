"""attnlab.runs.views beyond what test_explore.py covers (issue 39): a degenerate output is flagged once, in the
page's summary and on the logger of `Run.translations` (what `attnlab translate` calls), and the token strips'
labels carry no sentencepiece word mark."""

import logging

import pytest
import torch

from attnlab.app.api import Run
from attnlab.decode.translate import Translation
from attnlab.families.explorer import TokenChoice
from attnlab.runs.views import (Exploration, attention_exploration, degenerate, degenerate_warning,
                               format_decoding, strip_label, summary, which_name, which_text, word_labels, write_views)

MARK = "\u2581"


@pytest.mark.parametrize("pieces, why", [
    (["</s>"], "empty"),
    ([","] * 12, "repeats ','"),
    ([f"{MARK}sus", "tent"] * 17, "repeats 'sustent'"),
    ([f"{MARK}and", f"{MARK}the"] + [f"{MARK}x"] * 10, "repeats 'x'"),
])
def test_degenerate_outputs_are_flagged(pieces, why):
    assert why in degenerate(pieces)


@pytest.mark.parametrize("pieces", [
    [],
    [f"{MARK}the", f"{MARK}cat", "</s>"],
    [","] * 12 + ["</s>"],  # finished: a repetition the model chose to end is not "up to the length limit"
    [f"{MARK}the", f"{MARK}old", f"{MARK}cat", f"{MARK}sees", f"{MARK}the", f"{MARK}door"],  # cut, not repeating
    [",", ",", ","],  # too short to say
])
def test_real_outputs_are_not(pieces):
    assert degenerate(pieces) is None


def test_one_warning_line_for_a_batch():
    line = degenerate_warning([["</s>"], None, [f"{MARK}a", "</s>"], [","] * 8])
    assert "\n" not in line and "2 of 4" in line and "sentence 1, 4" in line
    assert degenerate_warning([[f"{MARK}a", "</s>"], None]) is None


def test_the_summary_carries_the_warning():
    ex = attention_exploration(torch.full((3, 4), 0.25), ["a", "b", "c", "</s>"], [",", ",", ","])
    assert summary(ex)["warning"] is None  # no output: nothing to judge
    ex.choices = [TokenChoice(",", 0.9, [(",", 0.9)]) for _ in range(6)]
    assert "repeats ','" in summary(ex)["warning"]
    ex.choices = [TokenChoice("</s>", 0.9, [("</s>", 0.9)])]
    assert "empty" in summary(ex)["warning"]


def test_strips_show_no_word_marks():
    pieces = [f"{MARK}In", f"{MARK}the", "beg", "inning", MARK, ",", "</s>"]
    assert [strip_label(p) for p in pieces] == [" In", " the", "beg", "inning", " ", ",", "</s>"]
    ex = Exploration.of(attention_exploration(torch.full((1, 7), 1 / 7), pieces, ["x"], scheme="sentencepiece"))
    m = summary(ex)["maps"][0]
    assert not any(MARK in t or "_" in t for t in m["col_strip"] + m["col_words"])
    assert word_labels(pieces, [0, 1, 1, 1, 2, 2, 3]) == ["In", "thebeginning", ",", "</s>"]


def test_byte_fallback_pieces_read_as_their_characters():
    """SentencePiece's byte fallback: "'" as <0x27>, "ñ" as the two UTF-8 bytes <0xC3><0xB1> (independently: the
    bytes of the string's own UTF-8 encoding)."""
    pieces = [f"{MARK}Naomi", f"<0x{ord(chr(39)):02X}>", "s", f"{MARK}se"] + [f"<0x{b:02X}>" for b in "ñ".encode()] + ["or"]
    assert word_labels(pieces, [0, 0, 0, 1, 1, 1, 1]) == ["Naomi's", "señor"]
    assert [strip_label(p) for p in pieces[:3]] == [" Naomi", "'", "s"]
    assert strip_label("<0xC3>") == "<0xC3>"  # one byte of a longer character is no character


def test_translations_log_a_degenerate_batch_once(monkeypatch, caplog):
    class Fake:
        def translate(self, sentences, **kw):
            return [[Translation("", -1.0, ["a", "</s>"], ["</s>"], None)] for _ in sentences]

    run = Run.__new__(Run)
    monkeypatch.setattr(Run, "require", lambda self, ability: None)
    run._translator = Fake()
    with caplog.at_level(logging.WARNING, logger="attnlab"):
        out = run.translations(["a b", "c d"])
    assert [n[0].text for n in out] == ["", ""]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "2 of 2" in warnings[0].getMessage() and "empty" in warnings[0].getMessage()


def test_single_maps_and_rollouts_are_not_titled_layer_1_head_1(tmp_path):
    """An RNN's alignment (1 layer, 1 head) names neither; a rollout (L layers, 1 head) names its layer only;
    the file names record layer, head and word mode."""
    pieces = [f"{MARK}my", f"{MARK}cat", "</s>"]
    align = attention_exploration(torch.full((2, 3), 1 / 3), pieces, ["a", "b"], title="bahdanau attention")
    roll = attention_exploration(torch.full((2, 1, 3, 3), 1 / 3), pieces, title="rollout of the encoder")
    assert which_text(align.maps["attention"], 0, 0) == "" and which_name(align.maps["attention"], 0, 0) == ""
    assert which_text(roll.maps["attention"], 1, None) == "layer 2"
    assert which_text(roll.maps["attention"], 1, None, True) == "layer 2, words"
    paths = write_views(align, tmp_path, views=("heatmap", "model", "head"), formats=("svg",))
    assert sorted(p.name for p in paths) == ["attention_head.svg", "attention_heatmap.svg", "attention_model.svg"]
    for p in paths:
        assert "head 1" not in p.read_text() and "layer 1" not in p.read_text()
    paths = write_views(roll, tmp_path, views=("heatmap",), formats=("svg",), words=True)
    assert [p.name for p in paths] == ["attention_heatmap_layer2_words.svg"]
    assert "head 1" not in paths[0].read_text()


def test_format_decoding_names_an_empty_hypothesis():
    ex = attention_exploration(torch.full((1, 2), 0.5), ["a", "</s>"], ["x"])
    ex.nbest = [("", -1.25)]
    assert "-1.2500  (empty)" in format_decoding(ex)
