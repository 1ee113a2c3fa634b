"""CTranslate2 export: the exported model's token log-probabilities equal attnlab's own (pre/post-norm, ReLU/GELU,
sinusoidal/learned positions, tied/untied output layer), greedy translations of a trained run are identical, the
CLI exports and translates, and RNN runs are refused."""

import shutil

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

from attnlab.cli import main  # noqa: E402
from attnlab.errors import AttnlabError  # noqa: E402
from attnlab.export import transformer_spec  # noqa: E402
from attnlab.tokenizers import BOS_ID, EOS_ID, SPECIALS  # noqa: E402
from attnlab.transformer import TransformerConfig, TransformerSeq2Seq  # noqa: E402
from attnlab.workflow import export_run, load_translator  # noqa: E402

V = 40


@pytest.fixture(scope="module")
def tiny_runs(tiny_runs, tmp_path_factory):
    """This module's copies of the session's runs: an export to its default place writes into the run directory,
    which the other modules share."""
    root = tmp_path_factory.mktemp("export_runs")
    return {name: shutil.copytree(run, root / name) for name, run in tiny_runs.items()}


@pytest.mark.parametrize("norm, activation, positions, tie", [
    ("pre", "relu", "sinusoidal", "all"), ("post", "relu", "sinusoidal", "none"),
    ("pre", "gelu", "learned", "decoder"), ("post", "gelu", "learned", "all")])
def test_exported_log_probs_equal_attnlab(tmp_path, norm, activation, positions, tie):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, h=4, d_ff=64, enc_layers=2, dec_layers=2, dropout=0.0, norm=norm,
                            activation=activation, positions=positions, tie_embeddings=tie, max_len=64)
    model = TransformerSeq2Seq(V, V, cfg).eval()
    with torch.no_grad():  # away from the initialisation's zero biases and unit gains
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    vocab = list(SPECIALS) + [f"w{i}" for i in range(len(SPECIALS), V)]
    spec = transformer_spec(model, vocab, vocab)
    spec.validate()
    spec.optimize()
    (tmp_path / "ct2").mkdir()
    spec.save(str(tmp_path / "ct2"))
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    g = torch.Generator().manual_seed(1)
    for S, T in ((7, 5), (3, 9)):
        src = torch.randint(len(SPECIALS), V, (S,), generator=g).tolist() + [EOS_ID]
        tgt = torch.randint(len(SPECIALS), V, (T,), generator=g).tolist()
        with torch.no_grad():
            logits = model(torch.tensor([src]), torch.tensor([len(src)]), torch.tensor([[BOS_ID] + tgt]))
        ours = logits.log_softmax(-1)[0].gather(1, torch.tensor(tgt + [EOS_ID])[:, None])[:, 0]  # (T + 1,)
        theirs = translator.score_batch([[vocab[i] for i in src]], [[vocab[i] for i in tgt]])[0].log_probs
        torch.testing.assert_close(torch.tensor(theirs), ours, atol=1e-4, rtol=1e-4)


def test_greedy_translations_of_a_trained_run_are_identical(tiny_runs, tmp_path):
    from attnlab.translate import CTranslate2Translator

    run = tiny_runs["transformer"]
    out = export_run(run, tmp_path / "ct2")
    ours = load_translator(run)
    theirs = CTranslate2Translator(out, ours.tokenizers, ours.decode)
    sentences = ["the red house", "my old door opens", "a cat sees the big green window and the small red door",
                 "the", "and and and and and and and and and"]
    a = [t[0].text for t in ours.translate(sentences, beam_size=1)]
    b = [t[0].text for t in theirs.translate(sentences, beam_size=1)]
    assert a == b


def test_cli_export_translate_and_refusals(tiny_runs, tmp_path, capsys):
    run = tiny_runs["transformer"]
    src = tmp_path / "in.txt"
    src.write_text("the red house\nmy cat\n")
    assert main(["export", str(run), "--to", "ctranslate2", "--quantization", "int8", "--out",
                 str(tmp_path / "int8")]) == 0
    assert (tmp_path / "int8" / "model.bin").is_file()
    assert (tmp_path / "int8" / "tokenizer" / "tokenizer.json").is_file()  # tokenizing needs no attnlab
    capsys.readouterr()
    assert main(["translate", str(run), str(src), "--beam", "1", "--device", "cpu"]) == 0
    torch_out = capsys.readouterr().out
    assert main(["translate", str(run), str(src), "--beam", "1", "--engine", "ctranslate2", "--ct2-model",
                 str(tmp_path / "int8")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(torch_out.splitlines()) == 2
    assert main(["export", str(tiny_runs["rnn"]), "--to", "ctranslate2", "--out", str(tmp_path / "rnn")]) == 2
    assert "cannot be exported to CTranslate2" in capsys.readouterr().err
    with pytest.raises(AttnlabError, match="quantization"):
        export_run(run, tmp_path / "x", quantization="int3")


def test_attention_of_the_export_is_the_last_layers_mean_over_heads_and_served(tiny_runs):
    """CTranslate2 returns the last decoder layer's cross-attention averaged over heads: equal to attnlab's, and
    `attnlab serve --engine ctranslate2` answers with it (one layer, one head) and attnlab's translation."""
    from fastapi.testclient import TestClient

    from attnlab.server import create_app, load_models
    from attnlab.translate import CTranslate2Translator

    run = tiny_runs["transformer"]
    ours = load_translator(run)
    theirs = CTranslate2Translator(export_run(run), ours.tokenizers, ours.decode)
    a = ours.translate(["the red house", "my cat"], beam_size=1, need_weights=True)
    b = theirs.translate(["the red house", "my cat"], beam_size=1, need_weights=True)
    for x, y in zip(a, b):
        assert x[0].tgt_tokens == y[0].tgt_tokens
        torch.testing.assert_close(y[0].attention, x[0].attention[:, -1].mean(1), atol=1e-5, rtol=0)
    client = TestClient(create_app(load_models([run], engine="ctranslate2")), raise_server_exceptions=False)
    r = client.post("/api/translate", json={"model": "transformer", "sentence": "the red house", "beam": 1})
    assert r.status_code == 200 and (r.json()["layers"], r.json()["heads"]) == (1, 1)
    assert r.json()["translation"] == a[0][0].text


@pytest.mark.parametrize("norm, activation, positions", [("pre", "relu", "sinusoidal"), ("post", "gelu", "learned")])
def test_exported_language_model_log_probs_equal_attnlab(tmp_path, norm, activation, positions):
    """The decoder-only LM through ctranslate2.Generator: the log-probability of every next token equals
    attnlab's."""
    from attnlab.export import language_model_spec
    from attnlab.lm import LMModelConfig, TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(V, LMModelConfig(d_model=32, h=4, d_ff=64, layers=2, dropout=0.0, norm=norm,
                                           activation=activation, positions=positions, max_len=64)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    vocab = list(SPECIALS) + [f"w{i}" for i in range(len(SPECIALS), V)]
    spec = language_model_spec(model, vocab)
    spec.validate()
    spec.optimize()
    (tmp_path / "lm").mkdir()
    spec.save(str(tmp_path / "lm"))
    generator = ctranslate2.Generator(str(tmp_path / "lm"), device="cpu")
    tokens = [BOS_ID] + torch.randint(len(SPECIALS), V, (9,), generator=torch.Generator().manual_seed(2)).tolist()
    with torch.no_grad():
        ours = model(torch.tensor([tokens])).log_softmax(-1)[0, :-1].gather(1, torch.tensor(tokens[1:])[:, None])[:, 0]
    theirs = generator.score_batch([[vocab[i] for i in tokens]])[0].log_probs
    torch.testing.assert_close(torch.tensor(theirs), ours, atol=1e-4, rtol=1e-4)
