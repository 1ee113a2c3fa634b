"""The Transformer's decoding state writes its KV cache in place, so one state steps once: stepping it twice (a
hand-written search that branches) is an AttnlabError, and `state.fork()` is the branch that works. A branching
search written from the docstring, with fork, gets the log-probabilities of a fresh teacher-forced pass."""

import doctest
import itertools

import pytest
import torch
import torch.nn.functional as F

from attnlab.core.errors import AttnlabError
from attnlab.data.tokenizers import BOS_ID, EOS_ID
from attnlab.decode.search import beam_search, select_batch
from attnlab.nn import transformer
from attnlab.nn.lm import LMModelConfig, TransformerLM
from attnlab.nn.transformer import CACHE_ROOM, TransformerConfig, TransformerSeq2Seq

V = 13


@pytest.fixture(scope="module")
def model() -> TransformerSeq2Seq:
    torch.manual_seed(0)
    return TransformerSeq2Seq(V, V, TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=2,
                                                      dropout=0.0)).eval()


SRC = torch.tensor([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, 0]])  # (2, S)
LENGTHS = torch.tensor([4, 3])


def reference_log_probs(model, paths: list[list[int]]) -> torch.Tensor:
    """log P(path | SRC) of each path and sentence from one teacher-forced forward pass (no cache): (P, 2)."""
    P, T = len(paths), len(paths[0])
    tgt = torch.tensor(paths).repeat_interleave(2, dim=0)  # (2P, T): each path for both sentences
    tgt_in = torch.cat([torch.full((2 * P, 1), BOS_ID), tgt[:, :-1]], dim=1)  # (2P, T)
    with torch.no_grad():
        lp = F.log_softmax(model(SRC.repeat(P, 1), LENGTHS.repeat(P), tgt_in).double(), dim=-1)  # (2P, T, V)
    return lp.gather(2, tgt[:, :, None])[:, :, 0].sum(1).view(P, 2)


@torch.no_grad()
def branching_search(model, fork: bool, width: int = 3, depth: int = 3) -> dict[tuple[int, ...], torch.Tensor]:
    """Every continuation of `depth` tokens among the `width` best at each node (chosen by sentence 0), through
    the docstring's interface (encode, init_state, step): each child steps its parent's state, forked or not.
    Returns {tokens: log P of both sentences (2,)}."""
    enc = model.encode(SRC, LENGTHS)
    leaves = {}

    def expand(prefix: tuple[int, ...], state, lp, log_prob) -> None:  # lp (2, V): the next token's log-probs
        if len(prefix) == depth:
            leaves[prefix] = log_prob
            return
        for token in (lp[0, 3:].topk(width).indices + 3).tolist():  # real tokens
            child_lp, child, _ = model.step(torch.full((2,), token), state.fork() if fork else state, enc)
            expand(prefix + (token,), child, child_lp, log_prob + lp[:, token].double())

    lp, state, _ = model.step(torch.full((2,), BOS_ID), model.init_state(enc), enc)
    expand((), state, lp, torch.zeros(2, dtype=torch.float64))
    return leaves


def test_stepping_one_state_twice_is_an_error(model):
    with pytest.raises(AttnlabError, match="was stepped already.*state.fork"):
        branching_search(model, fork=False)


def test_a_branching_search_with_fork_gets_the_teacher_forced_log_probs(model):
    leaves = branching_search(model, fork=True)
    assert len(leaves) == 27
    reference = reference_log_probs(model, [list(p) for p in leaves])  # (27, 2)
    torch.testing.assert_close(torch.stack(list(leaves.values())), reference, atol=1e-5, rtol=1e-5)


def test_a_forked_state_leaves_its_origin_intact(model):
    """At every step a branch is forked and stepped first: the origin then steps exactly as a chain that never
    branched, and the branch exactly as its own fork, across the cache's growth (its room doubles at CACHE_ROOM
    positions). A spent state with room left refuses a second step; one without room steps into new buffers."""
    enc = model.encode(SRC, LENGTHS)
    state = clean = model.init_state(enc)
    with torch.no_grad():
        for t in range(CACHE_ROOM + 3):
            branch = state.fork()
            lp_branch, _, _ = model.step(torch.full((2,), 4), branch, enc)
            prev = torch.full((2,), 5 + t % 7)
            lp, state, _ = model.step(prev, state, enc)
            lp_clean, clean, _ = model.step(prev, clean, enc)
            assert torch.equal(lp, lp_clean)
            alone, _, _ = model.step(torch.full((2,), 4), branch.fork(), enc)
            assert torch.equal(lp_branch, alone)
            if branch.t < branch.k_room.size(3):
                with pytest.raises(AttnlabError, match="stepped already"):
                    model.step(torch.full((2,), 4), branch, enc)
            else:
                assert torch.equal(model.step(torch.full((2,), 4), branch, enc)[0], alone)


def test_a_full_cache_may_step_twice(model):
    """A state whose buffers are full steps into new buffers: its own are never written, so a second step is safe
    and equal to the first."""
    enc = model.encode(SRC, LENGTHS)
    state = model.init_state(enc)  # no room at all yet
    with torch.no_grad():
        first, _, _ = model.step(torch.full((2,), BOS_ID), state, enc)
        second, _, _ = model.step(torch.full((2,), BOS_ID), state, enc)
    assert torch.equal(first, second)


def test_select_batch_gives_a_state_of_its_own(model):
    """beam search's reorder (select_batch) copies: the selected state steps freely, and so does its origin once."""
    enc = model.encode(SRC, LENGTHS)
    with torch.no_grad():
        _, state, _ = model.step(torch.full((2,), BOS_ID), model.init_state(enc), enc)
        picked = select_batch(state, torch.tensor([1, 0]))
        a, _, _ = model.step(torch.full((2,), 6), picked, enc.select_batch(torch.tensor([1, 0])))
        b, _, _ = model.step(torch.full((2,), 6), state, enc)
    assert torch.equal(a, b.flip(0))


def test_language_model_state_too():
    torch.manual_seed(0)
    lm = TransformerLM(V, LMModelConfig(d_model=16, h=2, d_ff=32, layers=2, dropout=0.0)).eval()
    with torch.no_grad():
        _, state, _ = lm.step(torch.full((2,), BOS_ID), lm.init_state(2))
        a, _, _ = lm.step(torch.full((2,), 7), state.fork())
        b, _, _ = lm.step(torch.full((2,), 7), state)
        with pytest.raises(AttnlabError, match="stepped already"):
            lm.step(torch.full((2,), 8), state)
    assert torch.equal(a, b)


def test_beam_search_equals_exhaustive_scoring(model):
    """The project's beam search (which reorders with select_batch) still finds, with a beam as wide as every
    2-token prefix, the 3-token path a fresh teacher-forced scoring ranks first (EOS banned: no path ends)."""
    hyps = beam_search(model, SRC, LENGTHS, beam_size=(V - 3) ** 2, max_len=3, length_penalty=0.0, banned=[EOS_ID])
    paths = [list(p) for p in itertools.product(range(3, V), repeat=3)]
    scores = reference_log_probs(model, paths)  # (1000, 2)
    for b in range(2):
        assert hyps[b][0].tokens == paths[int(scores[:, b].argmax())]
        assert hyps[b][0].log_prob == pytest.approx(float(scores[:, b].max()), abs=1e-4)


def test_the_docstring_example():
    tests = doctest.DocTestFinder().find(transformer.TransformerState, globs=vars(transformer))
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in tests:
        runner.run(t)
    assert runner.summarize(verbose=False).attempted >= 5 and runner.summarize(verbose=False).failed == 0
