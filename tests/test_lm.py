"""Decoder-only Transformer LM: its causal layer equals torch.nn.TransformerEncoderLayer with a causal mask; the
future never leaks into earlier logits; cached generation equals uncached re-runs; top-k/top-p filtering equals a
brute-force nucleus; perplexity equals a direct per-sentence computation; an LM-initialised translation decoder
reproduces the LM when its cross-attention is silenced; the CLI trains, evaluates, samples and rejects mistakes."""

import json
import math
import random
import shutil

import pytest
import torch

from attnlab import load
from attnlab.app.cli import main
from attnlab.core.errors import AttnlabError
from attnlab.data.batching import pack_rows
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from attnlab.decode.sampling import filter_logits, generate, sample_next
from attnlab.data.corpus import holdout
from attnlab.families.lm import LMTask, init_decoder_from_lm, load_lm_config, load_lm_data, lm_store_spec
from attnlab.nn.lm import LMModelConfig, TransformerLM
from attnlab.nn.transformer import DecoderLayer, TransformerConfig, TransformerSeq2Seq
from attnlab.runs.workflow import load_run, train


def _loaded_lm(run_dir):
    """(config, tokenizer, model) of a trained LM run."""
    run = load_run(run_dir, ability="generate")
    return run.cfg, run.tokenizers.tgt, run.model

D, H, FF, V = 16, 4, 32, 27


def _lm(**kw) -> TransformerLM:
    torch.manual_seed(0)
    model = TransformerLM(V, LMModelConfig(**{"d_model": D, "h": H, "d_ff": FF, "layers": 2, "dropout": 0.0,
                                              "max_len": 64, **kw})).double().eval()
    with torch.no_grad():  # zero biases and unit LayerNorms would hide mix-ups
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _tokens(B=3, T=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(4, V, (B, T), generator=g)
    x[:, 0] = BOS_ID
    return x


# ---------------------------------------------------------------------------------------------- model
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_causal_layer_matches_torch_encoder_layer(norm):
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True,
                                              norm_first=norm == "pre").double()
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.dim() == 1 and p.numel() == D else 0.0))
    cfg = TransformerConfig(d_model=D, h=H, d_ff=FF, dropout=0.0, norm=norm)
    ours = DecoderLayer(cfg, cross_attention=False).double()
    with torch.no_grad():
        wq, wk, wv = theirs.self_attn.in_proj_weight.chunk(3)
        bq, bk, bv = theirs.self_attn.in_proj_bias.chunk(3)
        for lin, w, b in ((ours.self_attn.W_Q, wq, bq), (ours.self_attn.W_K, wk, bk), (ours.self_attn.W_V, wv, bv),
                          (ours.self_attn.W_O, theirs.self_attn.out_proj.weight, theirs.self_attn.out_proj.bias)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        for name in ("linear1", "linear2"):
            getattr(ours.ff, name).load_state_dict(getattr(theirs, name).state_dict())
        for name in ("norm1", "norm2"):
            getattr(ours, name).load_state_dict(getattr(theirs, name).state_dict())
    x = torch.randn(2, 7, D, dtype=torch.float64)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(7, dtype=torch.float64)
    expected = theirs(x, src_mask=mask, is_causal=True)
    for need_weights in (False, True):  # fused kernel's causal mode and the explicit path
        out, w, _ = ours(x, need_weights=need_weights)  # causal by default
        torch.testing.assert_close(out, expected)
    assert torch.all(w.triu(diagonal=1) == 0)  # (B, H, T, T): no weight on future positions
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


@pytest.mark.parametrize("norm,positions", [("pre", "sinusoidal"), ("post", "learned")])
def test_future_tokens_do_not_change_earlier_logits(norm, positions):
    model = _lm(norm=norm, positions=positions)
    x = _tokens()
    y = x.clone()
    y[:, 5:] = torch.randint(4, V, y[:, 5:].shape)
    a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_right_padding_does_not_change_a_sentence():
    model = _lm()
    x = _tokens(B=2, T=9)
    alone = model(x[:1, :4])
    padded = x[:1].clone()
    padded[:, 4:] = PAD_ID
    torch.testing.assert_close(model(padded)[:, :4], alone)


@pytest.mark.parametrize("norm,positions", [("pre", "sinusoidal"), ("post", "learned")])
def test_cached_steps_match_the_full_forward(norm, positions):
    model = _lm(norm=norm, positions=positions)
    x = _tokens()
    full = model(x).log_softmax(-1)  # (B, T, V)
    state = model.init_state(3, dtype=torch.float64)
    maps = model.attention_maps(x)  # (B, N, H, T, T)
    for t in range(x.size(1)):
        lp, state, w = model.step(x[:, t], state, need_weights=True)
        torch.testing.assert_close(lp, full[:, t].float(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(w, maps[:, :, :, t, :t + 1])  # the same row of the explicit maps
    assert state.k.shape == (3, H, 2, x.size(1), D // H)


def test_tied_output_layer_and_gradients_reach_every_parameter():
    model = _lm()
    assert model.generator.weight is model.embed.weight
    model.train()
    model(_tokens()).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


# ---------------------------------------------------------------------------------------------- sampling
def _nucleus(probs: list[float], p: float) -> set[int]:
    """Brute force: the smallest set of most likely tokens whose total probability reaches p."""
    order = sorted(range(len(probs)), key=lambda i: -probs[i])
    kept, total = set(), 0.0
    for i in order:
        kept.add(i)
        total += probs[i]
        if total >= p:
            break
    return kept


@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.5, 0.9, 0.999])
def test_top_p_keeps_the_brute_force_nucleus(top_p):
    logits = torch.randn(4, 12, generator=torch.Generator().manual_seed(3)) * 2
    out = filter_logits(logits, top_p=top_p)
    for row in range(4):
        kept = {i for i in range(12) if out[row, i] > float("-inf")}
        assert kept == _nucleus(logits[row].softmax(-1).tolist(), top_p)
        torch.testing.assert_close(out[row, sorted(kept)], logits[row, sorted(kept)])


def test_top_k_and_temperature():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5, 2.5]])
    assert (filter_logits(logits, top_k=2) > float("-inf")).nonzero()[:, 1].tolist() == [1, 4]
    assert sample_next(logits, temperature=0).item() == 1
    g = torch.Generator().manual_seed(0)
    assert all(sample_next(logits, temperature=5.0, top_k=1, generator=g).item() == 1 for _ in range(20))
    # frequencies follow softmax(logits / T) restricted to the top 3
    n, temp = 20000, 0.7
    draws = sample_next(logits.expand(n, 5), temperature=temp, top_k=3, generator=g)
    expected = torch.zeros(5)
    expected[[1, 2, 4]] = (logits[0, [1, 2, 4]] / temp).softmax(-1)
    freq = torch.bincount(draws, minlength=5).float() / n
    # a seeded generator, so the same draws every run; and a bound with room: the binomial sd of a frequency is at
    # most sqrt(0.25 / 20000) = 0.0035, 0.015 is 4.2 sd
    torch.testing.assert_close(freq, expected, atol=0.015, rtol=0)


@pytest.mark.parametrize("temperature", [1e-94, 5e-324])
def test_a_tiny_temperature_samples_the_argmax(temperature):
    """logits / 1e-94 overflowed to inf, whose softmax is nan: torch.multinomial refused it (found by the fuzzing
    of `attnlab generate --temperature`). Shifted by the largest logit first, it is the argmax."""
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5, 2.5], [-1e4, -2.0, -3.0, -1e30, -2.5]])
    g = torch.Generator().manual_seed(0)
    assert sample_next(logits, temperature=temperature, generator=g).tolist() == [1, 1]
    assert sample_next(logits, temperature=temperature, top_p=0.5, generator=g).tolist() == [1, 1]


class _IdTokenizer:
    """Token ids as text: '5 6 7'."""

    control_ids = ()  # no piece decodes to a control character

    def encode(self, text):
        return [int(t) for t in text.split()]

    def decode(self, ids):
        return " ".join(str(i) for i in ids)


def test_greedy_generation_equals_uncached_argmax():
    model = _lm().float()
    prompt = [7, 9, 4]
    samples = generate(model, _IdTokenizer(), "7 9 4", num=2, max_len=12, temperature=0)
    seq = [BOS_ID, *prompt]
    for _ in range(12):  # re-run the whole prefix at every step: no cache
        logits = model(torch.tensor([seq]))[0, -1]
        logits[[PAD_ID, BOS_ID]] = float("-inf")
        nxt = int(logits.argmax())
        if nxt == EOS_ID:
            break
        seq.append(nxt)
    assert samples[0].tokens[: len(seq) - 4] == seq[4:]
    assert samples[0].text == samples[1].text == " ".join(map(str, seq[1:]))


def test_sampling_is_seeded_and_scores_are_model_logprobs():
    model = _lm().float()
    a = generate(model, _IdTokenizer(), "", num=3, max_len=10, temperature=1.0, top_p=0.9, seed=5)
    b = generate(model, _IdTokenizer(), "", num=3, max_len=10, temperature=1.0, top_p=0.9, seed=5)
    assert [s.tokens for s in a] == [s.tokens for s in b]
    s = a[0]
    seq = [BOS_ID, *s.tokens] + ([EOS_ID] if s.finished else [])
    lp = model(torch.tensor([seq[:-1]])).log_softmax(-1)[0]
    assert s.logprob == pytest.approx(sum(lp[t, seq[t + 1]].item() for t in range(len(seq) - 1)), abs=1e-3)
    with pytest.raises(AttnlabError, match="top_p"):
        generate(model, _IdTokenizer(), "", top_p=0.0)
    with pytest.raises(AttnlabError, match="max_len"):
        generate(model, _IdTokenizer(), "", max_len=100)


# ---------------------------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """A tiny character LM trained on counting sentences ("3 4 5 6"), its run directory."""
    d = tmp_path_factory.mktemp("lm")
    rng = random.Random(0)
    lines = []
    for _ in range(400):
        start = rng.randint(0, 5)
        lines.append(" ".join(str(start + i) for i in range(rng.randint(2, 4))))
    (d / "count.txt").write_text("\n".join(lines) + "\n\n", encoding="utf-8")  # one empty line, skipped
    (d / "lm.toml").write_text(f'''
[data]
corpus = "text"
train = "{d / 'count.txt'}"
dev_size = 40
test_size = 40
[tokenizer]
kind = "char"
[model]
family = "lm"
[model.lm]
d_model = 32
h = 4
d_ff = 64
layers = 2
dropout = 0.0
[train]
max_steps = 150
max_tokens = 600
lr = 0.003
eval_every = 50
progress = false
[generate]
temperature = 0
''', encoding="utf-8")
    assert main(["train", str(d / "lm.toml"), "--out", str(d / "run")]) == 0
    return d


def test_training_learns_and_perplexity_equals_direct_computation(lm_run):
    run = lm_run / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    dev = [r["dev_ppl"] for r in records if "dev_ppl" in r]
    assert dev[-1] < dev[0] and dev[-1] < 2.5  # digits are mostly predictable from the previous one
    result = load(run).evaluate("test")
    cfg, tok, model = _loaded_lm(run)
    # the held-out test lines drawn from the file itself (not the store): 40 + 40 of the non-empty lines, seed 0
    lines = [line for line in (lm_run / "count.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    test = holdout(lines, 40, 40)["test"]
    assert result["sentences"] == len(test) == 40
    nll, n = 0.0, 0
    for s in test:  # one sentence at a time, no batching or padding
        ids = [BOS_ID, *tok.encode(s), EOS_ID]
        lp = model(torch.tensor([ids[:-1]])).log_softmax(-1)[0]
        nll -= sum(lp[t, ids[t + 1]].item() for t in range(len(ids) - 1))
        n += len(ids) - 1
    assert result["tokens"] == n
    assert result["ppl_token"] == pytest.approx(math.exp(nll / n), rel=1e-4)
    assert json.loads((run / "eval" / "test.json").read_text())["ppl_token"] == result["ppl_token"]


def test_cli_generate_evaluate_summary_resume(lm_run, tmp_path, capsys):
    run = str(lm_run / "run")
    assert main(["generate", run, "--prompt", "2 3", "-n", "2", "--max-len", "6"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0] == out[1] and out[0].startswith("2 3 4")  # greedy by the run's config
    assert main(["evaluate", run, "--split", "dev", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 40
    assert main(["summary", run]) == 0
    assert "Total params" in capsys.readouterr().out
    resumed = shutil.copytree(lm_run / "run", tmp_path / "run")  # the module's other tests keep the 150-step run
    assert main(["train", "--resume", str(resumed), "--set", "train.max_steps=160"]) == 0
    assert json.loads((resumed / "checkpoints" / "latest.json").read_text())["step"] == 160


def test_evaluate_counts_words_once_and_refuses_an_empty_split(lm_run, tmp_path, capsys):
    """The message gives the words and the EOS of the split (it said "N words + EOS" with N counting the EOS
    already); a split left empty (data.test_size = 0, no test file) is refused, not given perplexity 1.00."""
    lines = [line for line in (lm_run / "count.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    words = sum(len(s.split()) for s in holdout(lines, 40, 40)["test"])
    assert main(["evaluate", str(lm_run / "run"), "--split", "test"]) == 0
    assert f"({words:,} words + 40 EOS)" in capsys.readouterr().out
    run = tmp_path / "no_test"
    assert main(["train", str(lm_run / "lm.toml"), "--out", str(run), "--set", "data.test_size=0",
                 "--set", "train.max_steps=2", "--set", "train.eval_every=2"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "test"]) == 2
    assert "the test split of this run's corpus is empty" in capsys.readouterr().err
    assert not (run / "eval" / "test.json").exists()


def test_cli_user_mistakes_exit_2(lm_run, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nfamily = "lm"\n[model.lm]\nlayerz = 2\n', encoding="utf-8")
    assert main(["train", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "model.lm.layerz" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # the option's range, checked by argparse
        main(["generate", str(lm_run / "run"), "--top-p", "1.5"])
    assert e.value.code == 2 and "argument --top-p: 1.5 exceeds the limit 1.0" in capsys.readouterr().err
    assert main(["generate", str(tmp_path / "nowhere")]) == 2
    assert "not a run directory" in capsys.readouterr().err
    with pytest.raises(AttnlabError, match="data.train"):
        lm_store_spec(load_lm_config(None, ["data.corpus=text"]))
    with pytest.raises(AttnlabError, match="data.dev and data.test"):
        lm_store_spec(load_lm_config(None, ["data.corpus=text", "data.train=a.txt", "data.dev=b.txt"]))


def test_the_lm_reads_its_text_through_a_prepared_store(lm_run, tmp_path):
    """Like translation, the LM trains from a prepared store: the training sentences are the store's ids (not
    Python lists), equal to the file's non-empty lines minus the held-out ones, encoded by the run's tokenizer;
    a second run of the config reuses the store."""
    cfg, tok, _ = _loaded_lm(lm_run / "run")
    store = load_lm_data(cfg, load_run(lm_run / "run").tokenizers)
    assert store.manifest["spec"]["monolingual"] == "lines"
    data = store.train_data()
    lines = [line for line in (lm_run / "count.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    train = holdout(lines, 40, 40)["train"]
    assert [data[i][2] for i in range(len(data))] == [tok.encode(s) for s in train]
    assert all(data[i][1] == [] for i in range(len(data)))  # a monolingual store keeps no source
    again = load_lm_data(cfg)
    assert again.path == store.path and again.key == store.key  # prepared once, reused
    bad = tmp_path / "bad.txt"  # a line that is not UTF-8: an error naming file:line, or skipped as the hint says
    bad.write_bytes(b"".join(f"w{i} x y\n".encode() for i in range(30)) + b"\xff bad\n")
    sets = [f"data.train={bad}", "data.dev_size=3", "data.test_size=3", "tokenizer.kind=char"]
    with pytest.raises(AttnlabError, match=r"bad.txt:31: .*data.skip_bad_lines = true"):
        load_lm_data(load_lm_config(lm_run / "lm.toml", sets))
    skipped = load_lm_data(load_lm_config(lm_run / "lm.toml", [*sets, "data.skip_bad_lines=true"]))
    assert len(skipped.train_data()) == 30 - 6
    out = tmp_path / "store"  # `attnlab data prepare` takes an LM config, and training reads that folder
    assert main(["data", "prepare", str(lm_run / "lm.toml"), "--out", str(out)]) == 0
    assert load_lm_data(load_lm_config(lm_run / "lm.toml", [f"data.store={out}"])).path == out


# ---------------------------------------------------------------------------------------------- transfer
def test_lm_initialised_decoder_reproduces_the_lm(lm_run, tmp_path):
    """With its cross-attention silenced (W_O = 0), a pre-norm decoder initialised from the LM computes the LM."""
    cfg, tok, lm = _loaded_lm(lm_run / "run")
    c = cfg.model.lm
    model = TransformerSeq2Seq(11, tok.vocab_size, TransformerConfig(
        d_model=c.d_model, h=c.h, d_ff=c.d_ff, enc_layers=1, dec_layers=c.layers, dropout=0.0, norm=c.norm,
        tie_embeddings="decoder")).eval()
    n = init_decoder_from_lm(model, load_run(lm_run / "run", ability="generate"))
    assert n == sum(p.numel() for p in lm.parameters())  # every LM parameter found a place
    with torch.no_grad():
        for layer in model.decoder:
            layer.cross_attn.W_O.weight.zero_()
            layer.cross_attn.W_O.bias.zero_()
    x = torch.tensor([[BOS_ID, *tok.encode("3 4 5")]])
    src = torch.randint(4, 11, (1, 5))
    torch.testing.assert_close(model(src, torch.tensor([5]), x), lm(x), atol=1e-5, rtol=1e-5)
    other = TransformerSeq2Seq(11, tok.vocab_size, TransformerConfig(d_model=c.d_model * 2, h=c.h,
                                                                       d_ff=c.d_ff, tie_embeddings="decoder"))
    with pytest.raises(AttnlabError, match="d_model"):
        init_decoder_from_lm(other, load_run(lm_run / "run", ability="generate"))


def test_translation_run_starts_from_the_lm(tiny_tsv, tmp_path):
    """`pretrained.decoder`: the run takes the LM's tokenizer as its target side and its weights in the decoder
    (checked at step 0); init_weights = false keeps only the tokenizer; a joint vocabulary is refused."""
    from conftest import one_thread, tiny_experiment

    from attnlab.core.checkpoint import load_weights
    from attnlab.core.config import to_dict
    from attnlab.families.translation import experiment_from_dict
    from attnlab.families.lm import LMExperimentConfig
    from attnlab.data.tokenizers import load_tokenizers

    lm_cfg = LMExperimentConfig()
    lm_cfg.data.corpus, lm_cfg.data.train, lm_cfg.data.dev_size, lm_cfg.data.test_size = \
        "text", str(tmp_path / "tgt.txt"), 20, 20
    (tmp_path / "tgt.txt").write_text("".join(line.split("\t")[1] for line in
                                              (tiny_tsv / "train.tsv").read_text().splitlines(keepends=True)))
    lm_cfg.tokenizer.kind = "char"
    lm_cfg.model.lm = LMModelConfig(d_model=32, h=2, d_ff=64, layers=2, dropout=0.0)
    lm_cfg.train.max_steps, lm_cfg.train.eval_every, lm_cfg.train.progress = 5, 5, False
    with one_thread():
        train(lm_cfg, tmp_path / "lm")
    _, lm_tok, lm = _loaded_lm(tmp_path / "lm")

    def run(name, **pretrained):
        data = to_dict(tiny_experiment(tiny_tsv, "transformer", max_steps=10))
        data["train"]["max_steps"] = 0
        data["tokenizer"]["joint"] = False
        data["model"]["transformer"]["tie_embeddings"] = "decoder"
        data["pretrained"] = {"decoder": str(tmp_path / "lm"), **pretrained}
        with one_thread():
            train(experiment_from_dict(data), tmp_path / name)
        model = TransformerSeq2Seq(load_tokenizers(tmp_path / name / "tokenizer").src.vocab_size,
                                   lm_tok.vocab_size, experiment_from_dict(data).model.transformer)
        load_weights(model, tmp_path / name / "checkpoints" / "step_00000000.safetensors")
        return model

    tuned = run("tuned")
    assert load_tokenizers(tmp_path / "tuned" / "tokenizer").tgt.encode("la casa") == lm_tok.encode("la casa")
    torch.testing.assert_close(tuned.decoder[1].ff.linear2.weight, lm.layers[1].ff.linear2.weight)
    torch.testing.assert_close(tuned.decoder[0].norm3.weight, lm.layers[0].norm2.weight)
    torch.testing.assert_close(tuned.tgt_embed.weight, lm.embed.weight)
    scratch = run("scratch", init_weights=False)
    assert not torch.allclose(scratch.decoder[1].ff.linear2.weight, lm.layers[1].ff.linear2.weight)
    data = to_dict(tiny_experiment(tiny_tsv, "transformer", max_steps=10))
    data["train"]["max_steps"] = 0
    data["pretrained"] = {"decoder": str(tmp_path / "lm")}
    with pytest.raises(AttnlabError, match="tokenizer.joint"):
        train(experiment_from_dict(data), tmp_path / "joint")


def test_translation_commands_refuse_an_lm_run(lm_run, capsys):
    for argv in (["translate", str(lm_run / "run")], ["plot", "attention", str(lm_run / "run"), "--sentence", "1 2"],
                 ["report", str(lm_run / "run"), "--out", str(lm_run / "r.html")]):
        assert main(argv) == 2
        assert "decoder-only Transformer LM run cannot translate" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- packing
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_packed_rows_equal_the_padded_batch(positions):
    """Sentences packed several per row (causal attention within each sentence, positions from its start) get the
    loss they get one per row: per sentence to 1e-10 in float64, summed to 1e-5 in float32."""
    g = torch.Generator().manual_seed(5)
    examples = [(i, torch.randint(4, V, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist())
                for i in range(10)]
    padded, packed = LMTask.collate(examples), LMTask.collate_packed(examples, row_len=24)
    assert packed.inputs.size(0) < padded.inputs.size(0) // 2
    model = _lm(positions=positions)
    with torch.no_grad():
        def per_sentence(batch):
            nll = torch.nn.functional.cross_entropy(model(batch.inputs, batch.segments).transpose(1, 2),
                                                    batch.targets, ignore_index=PAD_ID, reduction="none")  # (B, T)
            if batch.segments is None:
                return [float(row.sum()) for row in nll]
            return [float(nll[r][batch.segments.ids[r] == k].sum()) for r in range(nll.size(0))
                    for k in range(1, int(batch.segments.ids[r].max()) + 1)]
        order = [i for row in pack_rows([(len(s) + 1,) for _, s in examples], 24) for i in row]
        alone = per_sentence(padded)
        assert per_sentence(packed) == pytest.approx([alone[i] for i in order], rel=1e-10)
        model = model.float()
        (a, n_a), (b, n_b) = LMTask().loss(model, padded, 0.0), LMTask().loss(model, packed, 0.0)
    assert n_a == n_b and abs(a.item() - b.item()) <= 1e-5 * abs(a.item())
