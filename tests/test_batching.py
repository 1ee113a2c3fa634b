"""Token-budget batching: sampler properties (coverage, budget, determinism, distributed split), padding and
collation, and the DataLoader wiring. Expectations are computed independently of the module under test."""

import math
import random
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from attnlab.data.batching import (PackedBatchSampler, RowPacker, Seq2SeqBatch, Seq2SeqDataset, TokenBudgetBatchSampler,
                              collate_packed_seq2seq, collate_seq2seq, pad_sequences, padding_fraction)
from attnlab.core.errors import AttnlabError
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID

SETTINGS = settings(derandomize=True, max_examples=100, deadline=None)
lengths_st = st.lists(st.integers(0, 40), max_size=80)
budget_st = st.integers(1, 120)


def cost(batch, lengths):
    return len(batch) * max(lengths[i] for i in batch)


def sorted_order(lengths):
    return sorted(range(len(lengths)), key=lambda i: (lengths[i], i))


def batches_of(sampler, epoch=0):
    sampler.set_epoch(epoch)
    return list(sampler)


def test_special_ids():
    assert (PAD_ID, BOS_ID, EOS_ID) == (0, 1, 2)


# Sampler: concrete cases.

def test_sorted_batches_concrete():
    # sorted (length, index): 4:1, 1:3, 3:3, 0:5, 2:8, 5:20 -> [1,3,3] costs 9; 5 alone (2*8 > 10); 8 alone;
    # 20 is over budget and forms its own batch.
    s = TokenBudgetBatchSampler([5, 3, 8, 3, 1, 20], max_tokens=10, shuffle=False)
    assert list(s) == [[4, 1, 3], [0], [2], [5]]
    assert len(s) == 4


def test_pairs_use_max_of_src_and_tgt():
    # costs 7, 5, 3, 2 -> sorted 3:2, 2:3, 1:5, 0:7; [2,3] costs 6; adding 5 -> 15 > 12; [5] + 7 -> 14 > 12.
    s = TokenBudgetBatchSampler([(2, 7), (5, 1), (3, 3), (1, 2)], max_tokens=12, shuffle=False)
    assert list(s) == [[3, 2], [1], [0]]


def test_dataset_lengths_feed_sampler():
    ds = Seq2SeqDataset([[5, 6], [7], [8, 9, 10]], [[11], [12, 13, 14], []])
    assert ds.lengths() == [(3, 2), (2, 4), (4, 1)]
    # costs 3, 4, 4: [0, 1] costs 2 * 4 = 8 (fits exactly); adding 2 would cost 12
    assert list(TokenBudgetBatchSampler(ds.lengths(), 8, shuffle=False)) == [[0, 1], [2]]
    assert list(TokenBudgetBatchSampler(ds.lengths(), 7, shuffle=False)) == [[0], [1], [2]]


def test_empty_lengths():
    s = TokenBudgetBatchSampler([], max_tokens=5, num_replicas=3, rank=2)
    assert list(s) == [] and len(s) == 0


def test_epochs_differ_and_seed_matters():
    rng = random.Random(0)
    lengths = [rng.randint(1, 30) for _ in range(300)]
    s = TokenBudgetBatchSampler(lengths, max_tokens=100, seed=3)
    e0, e1 = batches_of(s, 0), batches_of(s, 1)
    assert e0 != e1
    assert batches_of(s, 0) == e0  # back to epoch 0: the same again
    assert batches_of(TokenBudgetBatchSampler(lengths, max_tokens=100, seed=4), 0) != e0


def test_ties_are_broken_differently_per_epoch():
    # 40 equal lengths, 4 per batch: with a fixed tie order every epoch would group the same examples.
    s = TokenBudgetBatchSampler([5] * 40, max_tokens=20, seed=0)
    groups = [{frozenset(b) for b in batches_of(s, e)} for e in range(2)]
    assert all(len(b) == 4 for b in batches_of(s, 0))
    assert groups[0] != groups[1]


def test_batch_order_is_shuffled():
    # distinct lengths: no ties, so the buckets are fixed and only their order can change between epochs
    lengths = list(range(1, 101))
    s = TokenBudgetBatchSampler(lengths, max_tokens=200, seed=0)
    e0, e1 = batches_of(s, 0), batches_of(s, 1)
    unshuffled = list(TokenBudgetBatchSampler(lengths, max_tokens=200, shuffle=False))
    assert sorted(e0) == sorted(e1) == sorted(unshuffled)
    assert len(e0) >= 8 and e0 != unshuffled and e1 != unshuffled and e0 != e1


# Sampler: properties.

@SETTINGS
@given(lengths=lengths_st, max_tokens=budget_st, seed=st.integers(0, 2**31), epoch=st.integers(0, 50),
       shuffle=st.booleans())
def test_sampler_properties(lengths, max_tokens, seed, epoch, shuffle):
    s = TokenBudgetBatchSampler(lengths, max_tokens, shuffle=shuffle, seed=seed)
    batches = batches_of(s, epoch)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # each index exactly once
    assert len(s) == len(batches)
    for b in batches:
        assert b, "empty batch"
        if cost(b, lengths) > max_tokens:
            assert len(b) == 1 and lengths[b[0]] > max_tokens
    # every over-long example sits alone
    for b in batches:
        if any(lengths[i] > max_tokens for i in b):
            assert len(b) == 1
    # the same (seed, epoch) on a fresh sampler gives identical batches
    assert batches_of(TokenBudgetBatchSampler(lengths, max_tokens, shuffle=shuffle, seed=seed), epoch) == batches
    # shuffling changes which equal-length examples go together and the batch order, not the bucket shapes
    eval_batches = list(TokenBudgetBatchSampler(lengths, max_tokens, shuffle=False))
    assert (sorted(tuple(sorted(lengths[i] for i in b)) for b in batches)
            == sorted(tuple(lengths[i] for i in b) for b in eval_batches))


@SETTINGS
@given(lengths=lengths_st, max_tokens=budget_st, epoch=st.integers(0, 50))
def test_unshuffled_is_sorted_greedy_and_epoch_independent(lengths, max_tokens, epoch):
    s = TokenBudgetBatchSampler(lengths, max_tokens, shuffle=False, seed=epoch)
    batches = batches_of(s, epoch)
    assert batches == batches_of(TokenBudgetBatchSampler(lengths, max_tokens, shuffle=False), 0)
    assert [i for b in batches for i in b] == sorted_order(lengths)
    # greedy: each batch is within budget unless a singleton, and the next example would not have fit
    for b, nxt in zip(batches, batches[1:]):
        assert len(b) == 1 or cost(b, lengths) <= max_tokens
        assert (len(b) + 1) * lengths[nxt[0]] > max_tokens


@SETTINGS
@given(lengths=st.lists(st.integers(1, 20), min_size=60, max_size=120), max_tokens=st.integers(20, 60),
       seed=st.integers(0, 1000))
def test_different_epochs_give_different_order(lengths, max_tokens, seed):
    s = TokenBudgetBatchSampler(lengths, max_tokens, seed=seed)
    e0 = batches_of(s, 0)
    assert len(e0) >= 3  # at most 3 examples of length 20 fit 60; 60 examples make >= 3 batches
    if len(e0) >= 8:  # 8! orders: a repeat would be a 1 in 40320 event
        assert batches_of(s, 1) != e0


# Distributed. The documented scheme: when the epoch's batch count is not a multiple of num_replicas, the last
# batches of two or more examples are halved until it is; rank r takes batches r, r + R, ...; only when there are
# fewer examples than ranks are batches repeated (cyclically).

def _halved_by_the_scheme(full, num_replicas):
    """Which single-replica batches the scheme halves (the last `need` ones of >= 2 examples), and whether one
    halving each is enough to reach a multiple of num_replicas."""
    need = (-len(full)) % num_replicas
    halved = [k for k in range(len(full) - 1, -1, -1) if len(full[k]) >= 2][:need]
    return set(halved), len(halved) == need


def _interleave(per_rank):
    """The global batch list the ranks stride over: rank r holds batches r, r + R, r + 2R, ..."""
    return [per_rank[r][k] for k in range(len(per_rank[0])) for r in range(len(per_rank))]


def _per_rank(lengths, max_tokens, num_replicas, epoch=0, **kw):
    return [batches_of(TokenBudgetBatchSampler(lengths, max_tokens, num_replicas=num_replicas, rank=r, **kw), epoch)
            for r in range(num_replicas)]


@SETTINGS
@given(lengths=lengths_st, max_tokens=budget_st, num_replicas=st.integers(1, 5), seed=st.integers(0, 99),
       epoch=st.integers(0, 9), shuffle=st.booleans())
def test_distributed_split(lengths, max_tokens, num_replicas, seed, epoch, shuffle):
    full = batches_of(TokenBudgetBatchSampler(lengths, max_tokens, shuffle=shuffle, seed=seed), epoch)
    per_rank = _per_rank(lengths, max_tokens, num_replicas, epoch, shuffle=shuffle, seed=seed)
    m = math.ceil(len(full) / num_replicas)
    # every rank gets the same number of batches: the fewest with which the ranks cover the epoch
    assert [len(b) for b in per_rank] == [m] * num_replicas
    assert [len(TokenBudgetBatchSampler(lengths, max_tokens, shuffle=shuffle, seed=seed, num_replicas=num_replicas,
                                        rank=r)) for r in range(num_replicas)] == [m] * num_replicas
    if num_replicas == 1:
        assert per_rank[0] == full  # a single replica: the batches are untouched
    # a rank's batch is never empty and is part of one single-replica batch (batches are split, never merged), so
    # the budget holds except for a batch of one example
    where = {i: k for k, b in enumerate(full) for i in b}
    for b in (b for batches in per_rank for b in batches):
        assert b and len(set(b)) == len(b) and len({where[i] for i in b}) == 1
        assert len(b) == 1 or cost(b, lengths) <= max_tokens
    seen = Counter(i for batches in per_rank for b in batches for i in b)
    assert set(seen) == set(range(len(lengths)))  # the ranks together cover the epoch
    halved, enough = _halved_by_the_scheme(full, num_replicas)
    got = _interleave(per_rank)
    if enough:
        # the last batches of >= 2 examples halved in place (halves differ by at most one example), then strided:
        # each example is read exactly once across the ranks
        j = 0
        for k, b in enumerate(full):
            if k in halved:
                assert got[j] + got[j + 1] == b and abs(len(got[j]) - len(got[j + 1])) <= 1
                j += 2
            else:
                assert got[j] == b
                j += 1
        assert j == len(got)
        assert all(c == 1 for c in seen.values())
    elif len(lengths) < num_replicas:
        # fewer examples than ranks: the batches repeat cyclically so that every rank has one
        distinct = len({tuple(b) for b in got})
        assert got == [got[k % distinct] for k in range(len(got))]


@pytest.mark.parametrize("lengths, max_tokens, num_replicas", [
    ([1] * 5, 10, 4),  # one batch of 5 examples, 4 ranks: halved, and its halves halved again
    ([2] * 6, 12, 4),  # one batch of 6 examples, 4 ranks
    ([5, 3, 8, 3, 1, 20], 10, 3),  # the concrete case below
])
def test_distributed_reads_every_example_once_when_there_are_enough(lengths, max_tokens, num_replicas):
    assert len(lengths) >= num_replicas
    for shuffle in (False, True):
        per_rank = _per_rank(lengths, max_tokens, num_replicas, shuffle=shuffle, seed=1)
        assert len({len(b) for b in per_rank}) == 1
        seen = Counter(i for batches in per_rank for b in batches for i in b)
        assert seen == Counter(range(len(lengths))), per_rank


def test_distributed_fewer_examples_than_ranks():
    # one batch [0, 1] and three ranks: halved into [0] and [1], then repeated: every rank gets one batch of one
    for shuffle in (False, True):
        per_rank = _per_rank([2, 2], 10, 3, shuffle=shuffle)
        assert [len(b) for b in per_rank] == [1, 1, 1]
        assert sorted(per_rank[0] + per_rank[1]) == [[0], [1]] and per_rank[2] == per_rank[0]
    # a single example: every rank reads it
    assert _per_rank([4], 10, 3) == [[[0]]] * 3


def test_distributed_singletons_that_cannot_be_split_repeat():
    # 3 examples that fit a batch only alone, 2 ranks: 3 batches cannot be split into 4; rank 1 repeats one
    per_rank = _per_rank([6, 6, 6], 10, 2, shuffle=False)
    assert per_rank == [[[0], [2]], [[1], [0]]]


def test_distributed_concrete():
    # unshuffled batches [[4, 1, 3], [0], [2], [5]] over 2 ranks: 4 batches already divide, nothing is split
    assert _per_rank([5, 3, 8, 3, 1, 20], 10, 2, shuffle=False) == [[[4, 1, 3], [2]], [[0], [5]]]
    # over 5 ranks: [4, 1, 3] halved ([4], [1, 3]) gives 5 batches, one per rank (3 ranks: the test below)
    assert _per_rank([5, 3, 8, 3, 1, 20], 10, 5, shuffle=False) == [[[4]], [[1, 3]], [[0]], [[2]], [[5]]]


def test_distributed_concrete_three_ranks():
    # over 3 ranks the 4 batches must become 6: [4, 1, 3] split in place into [4], [1], [3]; every example once
    per_rank = _per_rank([5, 3, 8, 3, 1, 20], 10, 3, shuffle=False)
    assert _interleave(per_rank) == [[4], [1], [3], [0], [2], [5]]
    assert per_rank == [[[4], [0]], [[1], [2]], [[3], [5]]]


# Padding and collation.

def test_pad_sequences():
    out = pad_sequences([[3, 4, 5], [6], []])
    assert out.dtype == torch.long
    assert out.tolist() == [[3, 4, 5], [6, 0, 0], [0, 0, 0]]
    assert pad_sequences([[7], [8, 9]], pad_id=-1).tolist() == [[7, -1], [8, 9]]
    assert pad_sequences([]).shape == (0, 0)
    assert pad_sequences([[], []]).shape == (2, 0)


def test_collate_concrete():
    ds = Seq2SeqDataset([[5, 6, 7], [8]], [[9], [10, 11, 12]])
    assert ds[1] == (1, [8], [10, 11, 12]) and len(ds) == 2
    b = collate_seq2seq([ds[1], ds[0]])
    assert b.src.tolist() == [[8, EOS_ID, PAD_ID, PAD_ID], [5, 6, 7, EOS_ID]]
    assert b.src_lengths.tolist() == [2, 4]
    assert b.tgt_in.tolist() == [[BOS_ID, 10, 11, 12], [BOS_ID, 9, PAD_ID, PAD_ID]]
    assert b.tgt_out.tolist() == [[10, 11, 12, EOS_ID], [9, EOS_ID, PAD_ID, PAD_ID]]
    assert b.indices.tolist() == [1, 0]
    assert all(t.dtype == torch.long for t in (b.src, b.src_lengths, b.tgt_in, b.tgt_out, b.indices))
    assert b.num_src_tokens == 6 and b.num_tgt_tokens == 6
    moved = b.to("cpu")
    assert isinstance(moved, Seq2SeqBatch) and torch.equal(moved.tgt_out, b.tgt_out)


def test_collate_empty_target():
    b = collate_seq2seq([(3, [4], [])])
    assert b.tgt_in.tolist() == [[BOS_ID]] and b.tgt_out.tolist() == [[EOS_ID]] and b.num_tgt_tokens == 1


@SETTINGS
@given(pairs=st.lists(st.tuples(st.lists(st.integers(3, 50), max_size=8), st.lists(st.integers(3, 50), max_size=8)),
                      min_size=1, max_size=10))
def test_collate_properties(pairs):
    b = collate_seq2seq([(i, s, t) for i, (s, t) in enumerate(pairs)])
    B, S, T = len(pairs), max(len(s) for s, _ in pairs) + 1, max(len(t) for _, t in pairs) + 1
    assert b.src.shape == (B, S) and b.tgt_in.shape == (B, T) and b.tgt_out.shape == (B, T)
    for row, (s, t) in enumerate(pairs):
        assert b.src[row].tolist() == s + [EOS_ID] + [PAD_ID] * (S - len(s) - 1)
        assert b.tgt_in[row].tolist() == [BOS_ID] + t + [PAD_ID] * (T - len(t) - 1)
        assert b.tgt_out[row].tolist() == t + [EOS_ID] + [PAD_ID] * (T - len(t) - 1)
        assert b.src_lengths[row] == len(s) + 1
    assert b.num_tgt_tokens == sum(len(t) + 1 for _, t in pairs)


# DataLoader wiring.

@pytest.mark.parametrize("shuffle", [True, False])
def test_loader_reproduces_sampler_batches(shuffle):
    rng = random.Random(1)
    src = [[rng.randint(3, 99) for _ in range(rng.randint(0, 12))] for _ in range(50)]
    tgt = [[rng.randint(3, 99) for _ in range(rng.randint(0, 12))] for _ in range(50)]
    ds = Seq2SeqDataset(src, tgt)
    # the trainer's wiring: a DataLoader over the sampler with the collate function
    loader = DataLoader(ds, batch_sampler=TokenBudgetBatchSampler(ds.lengths(), 40, shuffle=shuffle, seed=7),
                        collate_fn=collate_seq2seq)
    for epoch in (0, 1):
        loader.batch_sampler.set_epoch(epoch)
        expected = batches_of(TokenBudgetBatchSampler(ds.lengths(), 40, shuffle=shuffle, seed=7), epoch)
        got = list(loader)
        assert len(loader) == len(expected)
        assert [b.indices.tolist() for b in got] == expected
        for b in got:
            assert b.src.numel() <= 40 and b.tgt_in.numel() <= 40  # the budget bounds the padded tensors
            for row, i in enumerate(b.indices.tolist()):
                assert b.src[row, :len(src[i]) + 1].tolist() == src[i] + [EOS_ID]
                assert b.tgt_out[row, :len(tgt[i]) + 1].tolist() == tgt[i] + [EOS_ID]
    # a plain DataLoader given the batch list works the same (how the trainer resumes mid-epoch)
    plain = DataLoader(ds, batch_sampler=expected[2:], collate_fn=collate_seq2seq)
    assert [b.indices.tolist() for b in plain] == expected[2:]


# Bad arguments.

@pytest.mark.parametrize("kwargs, message", [
    (dict(max_tokens=0), r"max_tokens \(0\)"),
    (dict(max_tokens=-3), r"max_tokens \(-3\)"),
    (dict(max_tokens=2.5), r"max_tokens \(2\.5\)"),
    (dict(max_tokens=10, num_replicas=0), r"num_replicas \(0\)"),
    (dict(max_tokens=10, num_replicas=2, rank=2), r"rank \(2\) must be in \[0, num_replicas \(2\)\)"),
    (dict(max_tokens=10, rank=-1), r"rank \(-1\)"),
])
def test_bad_sampler_arguments(kwargs, message):
    with pytest.raises(AttnlabError, match=message):
        TokenBudgetBatchSampler([1, 2, 3], **kwargs)


@pytest.mark.parametrize("lengths, message", [
    ([3, -1], r"lengths\[1\] = -1"),
    ([(1, 2), (3, 4, 5)], r"lengths\[1\] = \(3, 4, 5\)"),
    ([2, "x"], r"lengths\[1\] = 'x'"),
    ([(1, 2.5)], r"lengths\[0\] = \(1, 2\.5\)"),
])
def test_bad_lengths(lengths, message):
    with pytest.raises(AttnlabError, match=message):
        TokenBudgetBatchSampler(lengths, 10)


def test_dataset_size_mismatch():
    with pytest.raises(AttnlabError, match=r"src_ids has 2 examples but tgt_ids has 1"):
        Seq2SeqDataset([[1], [2]], [[3]])


# ---------------------------------------------------------------------------------------------- packing
def _pairs(n, seed=0, longest=9):
    rng = random.Random(seed)
    return [(i, [rng.randrange(4, 30) for _ in range(rng.randint(1, longest))],
             [rng.randrange(4, 30) for _ in range(rng.randint(1, longest))]) for i in range(n)]


def test_row_packer_first_fit_on_both_sides():
    packer = RowPacker(10, max_rows=2)
    assert packer.add((6, 2)) and packer.add((5, 5)) and packer.add((4, 8))  # 2nd: source side full; 3rd fits row 0
    assert packer.rows == [[0, 2], [1]] and packer.used == [[10, 10], [5, 5]]
    assert packer.add((5, 5)) and packer.rows[1] == [1, 3]
    assert not packer.add((1, 1))  # both rows full, no third row allowed
    assert RowPacker(4).add((9,))  # longer than a row: a row of its own when one may be opened


@pytest.mark.parametrize("num_replicas", [1, 3])
def test_packed_sampler_covers_every_example_once_and_fits_its_rows(num_replicas):
    data = Seq2SeqDataset([s for _, s, _ in _pairs(200)], [t for _, _, t in _pairs(200)])
    lengths = data.lengths()
    row_len, max_tokens = 12, 60
    seen = Counter()
    for rank in range(num_replicas):
        sampler = PackedBatchSampler(lengths, max_tokens, row_len, seed=3, num_replicas=num_replicas, rank=rank)
        for batch in batches_of(sampler, epoch=1):
            seen.update(batch)
            packed = collate_packed_seq2seq([data[i] for i in batch], row_len)
            assert packed.src.size(0) <= max_tokens // row_len
            assert packed.src.size(1) <= row_len and packed.tgt_in.size(1) <= row_len
            assert sorted(packed.indices.tolist()) == sorted(batch)
    assert seen == Counter(range(200))  # every example exactly once, over one rank or split across three
    again = PackedBatchSampler(lengths, max_tokens, row_len, seed=3)
    other = PackedBatchSampler(lengths, max_tokens, row_len, seed=3)
    assert batches_of(again, 2) == batches_of(other, 2) != batches_of(other, 3)


def test_packed_sampler_refuses_rows_shorter_than_an_example():
    with pytest.raises(AttnlabError, match=r"row length \(5\).*longest example \(8"):
        PackedBatchSampler([(3, 8), (2, 2)], 100, 5)
    assert PackedBatchSampler([(3, 8), (2, 2)], 100, 0).row_len == 8


def test_collate_packed_rows_segments_and_positions():
    examples = [(7, [10, 11], [20]), (3, [12], [21, 22, 23]), (5, [13, 14, 15], [24])]
    b = collate_packed_seq2seq(examples, row_len=6)  # rows: [7, 3] (src 3+2, tgt 2+4), [5]
    assert b.src.tolist() == [[10, 11, EOS_ID, 12, EOS_ID], [13, 14, 15, EOS_ID, PAD_ID]]
    assert b.tgt_in.tolist() == [[BOS_ID, 20, BOS_ID, 21, 22, 23], [BOS_ID, 24, PAD_ID, PAD_ID, PAD_ID, PAD_ID]]
    assert b.tgt_out.tolist() == [[20, EOS_ID, 21, 22, 23, EOS_ID], [24, EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID]]
    assert b.src_lengths.tolist() == [5, 4] and b.indices.tolist() == [7, 3, 5]
    assert b.src_segments.ids.tolist() == [[1, 1, 1, 2, 2], [1, 1, 1, 1, 0]]
    assert b.src_segments.pos.tolist() == [[0, 1, 2, 0, 1], [0, 1, 2, 3, 0]]
    assert b.tgt_segments.ids.tolist() == [[1, 1, 2, 2, 2, 2], [1, 1, 0, 0, 0, 0]]
    assert b.tgt_segments.pos.tolist() == [[0, 1, 0, 1, 2, 3], [0, 1, 0, 0, 0, 0]]
    assert b.num_tgt_tokens == 8
    moved = b.to("cpu")
    assert torch.equal(moved.tgt_segments.ids, b.tgt_segments.ids)


def test_packing_cuts_padding_of_random_batches():
    rng = random.Random(4)
    lengths = [rng.randint(1, 30) for _ in range(300)]  # translation pairs: target length near source length
    examples = [(i, [5] * n, [6] * max(1, n + rng.randint(-2, 2))) for i, n in enumerate(lengths)]
    padded = collate_seq2seq(examples)
    packed = collate_packed_seq2seq(examples, row_len=64)
    assert padding_fraction([packed]) < 0.1 < 0.4 < padding_fraction([padded])
