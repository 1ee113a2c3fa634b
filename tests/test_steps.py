"""The decoding step by step (`attnlab.runs.views.DecodingSteps`, the explorer's step player): beam search's tree is
its own trace and its finished hypotheses are the n-best list; the kept beams rebuild the translation; each
step's top 5 and chosen token agree with the translation and with the model's own `step`; the context vectors
equal the attention-weighted sums recomputed from the encoder (RNN: c_t = sum_j a_tj h_j; Transformer: each head's
segment sum_j a_hj v_hj); the payloads, the server's GET /api/explore/{id}/steps and the inline page carry them.
Tiny untrained models built in memory, seeded."""

import json
import math

import numpy as np
import pytest
import torch
from test_explore import SENTENCE, char_pair, tiny_translator

from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from attnlab.decode.translate import DecodeConfig, Translator
from attnlab.families.translation import explore_translation
from attnlab.nn.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq
from attnlab.runs.views import embedded_data, steps_payload, summary

pytestmark = pytest.mark.usefixtures("single_thread")

RNN_KINDS = ["bahdanau", "general", "dot", "parameterized"]


def rnn_translator(attention: str, seed: int = 0, beam: int = 3) -> Translator:
    torch.manual_seed(seed)
    tok = char_pair()
    cfg = RNNModelConfig(emb_dim=8, hidden_dim=12, attention=attention, dropout=0.0, cell="lstm")
    model = RNNSeq2Seq(tok.src.vocab_size, tok.tgt.vocab_size, cfg).eval()
    return Translator(model, tok, DecodeConfig(beam_size=beam, max_len_ratio=0.5, max_len_offset=4))


def translators():
    return [("transformer", tiny_translator("pre", seed)) for seed in (0, 1)] + \
        [(kind, rnn_translator(kind, seed)) for kind in RNN_KINDS for seed in (0, 1)]


def walk(tree: list[dict], step: int, j: int) -> list[str]:
    """The pieces of candidate j at `step` of the summary's tree, following parents through the kept slots."""
    pieces = [tree[step]["candidates"][j]["piece"]]
    while step > 0:
        parent = tree[step]["candidates"][j]["parent"]
        step -= 1
        (j,) = [i for i, c in enumerate(tree[step]["candidates"]) if c["slot"] == parent and c["status"] == "kept"]
        pieces.append(tree[step]["candidates"][j]["piece"])
    return pieces[::-1]


@pytest.mark.parametrize("name, tr", translators(), ids=lambda x: x if isinstance(x, str) else "")
def test_beam_tree_finished_hypotheses_are_the_nbest_and_kept_beams_rebuild_them(name, tr):
    ex = explore_translation(tr, SENTENCE, beam=3)
    nbest = tr.translate([SENTENCE], beam_size=3, n_best=3)[0]
    tree = summary(ex)["steps"]["tree"]
    assert [s["step"] for s in tree] == list(range(len(tree)))
    ends = [(c["score"], c["text"], walk(tree, s["step"], j)) for s in tree for j, c in enumerate(s["candidates"])
            if c["status"] in ("finished", "unfinished")]
    finished = sorted((e for e in ends if e[2][-1] == "</s>"), key=lambda e: e[0], reverse=True)
    unfinished = sorted((e for e in ends if e[2][-1] != "</s>"), key=lambda e: e[0], reverse=True)
    ranked = (finished + unfinished)[:len(nbest)]
    assert [text for _, text, _ in ranked] == [t.text for t in nbest] == [t for t, _ in ex.nbest]
    assert [score for score, _, _ in ranked] == pytest.approx([t.score for t in nbest], abs=1e-4)
    assert [pieces for _, _, pieces in ranked] == [t.tgt_tokens for t in nbest]
    # the best path's kept candidates carry the translation's own log-probs, step by step
    best = ranked[0][2]
    assert [c.piece for c in ex.choices] == best
    for t in range(len(best)):
        on_path = [c for j, c in enumerate(tree[t]["candidates"]) if walk(tree, t, j) == best[:t + 1]]
        assert len(on_path) == 1
        assert on_path[0]["log_prob"] == pytest.approx(sum(math.log(c.prob) for c in ex.choices[:t + 1]), abs=1e-3)


@torch.no_grad()
@pytest.mark.parametrize("name, tr", translators(), ids=lambda x: x if isinstance(x, str) else "")
def test_each_steps_top5_and_chosen_token_agree_with_the_translation_and_the_models_step(name, tr):
    ex = explore_translation(tr, SENTENCE, beam=3)
    best = tr.translate([SENTENCE], beam_size=3)[0][0]
    tgt = tr.tokenizers.tgt
    piece_id = {tgt.id_to_piece(i): i for i in range(tgt.vocab_size)}
    assert [c.piece for c in ex.choices] == best.tgt_tokens and ex.steps.context.size(1) == len(best.tgt_tokens)
    # the search's own step function, fed the best hypothesis one token at a time
    ids = tr.encode_source([SENTENCE])[0]
    enc = tr.model.encode(torch.tensor([ids]), torch.tensor([len(ids)]))
    state, prev = tr.model.init_state(enc), BOS_ID
    for t, choice in enumerate(ex.choices):
        log_probs, state, _ = tr.model.step(torch.tensor([prev]), state, enc)  # (1, V)
        log_probs[0, [PAD_ID, BOS_ID]] = float("-inf")  # never generated
        top = log_probs[0].topk(5)
        assert [p for p, _ in choice.top] == [tgt.id_to_piece(i) for i in top.indices.tolist()]
        np.testing.assert_allclose([x for _, x in choice.top], top.values.exp().numpy(), atol=1e-5)
        assert choice.prob == pytest.approx(log_probs[0, piece_id[choice.piece]].exp().item(), abs=1e-5)
        prev = piece_id[choice.piece]
    assert (prev == EOS_ID) == (best.tgt_tokens[-1] == "</s>")


def test_greedy_has_steps_but_no_tree():
    tr = rnn_translator("bahdanau")
    ex = explore_translation(tr, SENTENCE, beam=1)
    s = summary(ex)["steps"]
    assert s["tree"] is None and s["map"] == "align" and s["steps"] == len(ex.choices)
    # greedy: the chosen token is each step's most probable one
    assert all(c.piece == c.top[0][0] for c in ex.choices)


@torch.no_grad()
@pytest.mark.parametrize("kind", RNN_KINDS)
def test_rnn_context_is_the_attention_weighted_sum_of_the_encoder_outputs(kind):
    tr = rnn_translator(kind, seed=2)
    ex = explore_translation(tr, SENTENCE, beam=3)
    model = tr.model
    ids = tr.encode_source([SENTENCE])[0]
    outputs, _, _ = model.encoder(torch.tensor([ids]), torch.tensor([len(ids)]))  # (1, S, He)
    h = outputs[0]  # (S, He)
    if kind == "parameterized":  # its values are W_V h_j
        h = h @ model.attention.W_V.weight.T + (0 if model.attention.W_V.bias is None else model.attention.W_V.bias)
    a = ex.maps["align"].weights[0, 0]  # (T, S): the search's own alignment
    want = a.double() @ h.double()  # (T, He)
    got = ex.steps.context[0]  # (T, He)
    assert got.shape == want.shape and ex.steps.heads == 1
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), atol=2e-5)
    np.testing.assert_allclose(a.sum(-1).numpy(), 1.0, atol=1e-5)


@torch.no_grad()
def test_transformer_context_is_each_heads_weighted_sum_of_its_values():
    tr = tiny_translator("post", seed=3)
    ex = explore_translation(tr, SENTENCE, beam=3)
    model = tr.model
    ids = tr.encode_source([SENTENCE])[0]
    memory = model.encode(torch.tensor([ids]), torch.tensor([len(ids)])).memory[0].double()  # (S, D)
    cross = ex.maps["cross"].weights.double()  # (L, H, T, S)
    L, H, T, S = cross.shape
    assert ex.steps.context.shape == (L, T, 16) and ex.steps.heads == H == 4
    for layer in range(L):
        W_V = model.decoder[layer].cross_attn.W_V
        v = (memory @ W_V.weight.double().T + W_V.bias.double()).view(S, H, 16 // H)  # (S, H, Dh)
        want = torch.einsum("hts,shd->thd", cross[layer], v).reshape(T, 16)  # heads concatenated
        np.testing.assert_allclose(ex.steps.context[layer].numpy(), want.detach().numpy(), atol=2e-5)


def test_steps_payloads_and_the_inline_page_carry_them():
    ex = explore_translation(tiny_translator("pre"), SENTENCE, beam=2)
    s = summary(ex)["steps"]
    assert (s["map"], s["layers"], s["steps"], s["dim"], s["heads"]) == ("cross", 2, len(ex.choices), 16, 4)
    assert "before W^O" in s["context"] and json.loads(json.dumps(s)) == s
    p = steps_payload(ex, 1)
    np.testing.assert_allclose(p["context"], ex.steps.context[1].numpy(), atol=5e-5)
    data = embedded_data(ex, "tiny")
    assert data["steps"] == {"0": steps_payload(ex, 0), "1": p} and data["exploration"]["steps"] == s
    with pytest.raises(Exception, match="layer 2 is out of range"):
        steps_payload(ex, 2)


def test_server_steps_endpoint(tiny_runs):
    from fastapi.testclient import TestClient

    from attnlab.app.server import create_app, load_models

    client = TestClient(create_app(load_models([tiny_runs["rnn"], tiny_runs["transformer"]], max_chars=300)),
                        raise_server_exceptions=False)
    for name, beam in (("rnn", 2), ("transformer", 2), ("rnn", 1)):
        got = client.post("/api/explore", json={"model": name, "sentence": "the red house", "beam": beam}).json()
        steps = got["steps"]
        assert steps["steps"] == len(got["choices"]) and (steps["tree"] is None) == (beam == 1)
        r = client.get(f"/api/explore/{got['id']}/steps", params={"layer": steps["layers"] - 1})
        assert r.status_code == 200 and np.array(r.json()["context"]).shape == (steps["steps"], steps["dim"])
        r = client.get(f"/api/explore/{got['id']}/steps", params={"layer": steps["layers"]})
        assert r.status_code == 422 and "out of range" in r.json()["error"]
    assert client.get("/api/explore/0123456789abcdef/steps").status_code == 404
