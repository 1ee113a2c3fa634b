"""Token-budget batching for seq2seq training (fairseq's `max_tokens`): length buckets cut under a padded-token
budget, a seq2seq dataset of pre-tokenized pairs, and its collate function.

Packing (`train.pack`): instead of one sentence per row, several sentences share a row, first-fit, so that a
batch is nearly free of padding without sorting by length. `Segments` says which sentence of its row each token
belongs to and its position inside that sentence; the model turns them into block-diagonal attention masks
(`attnlab.nn.attention.segment_mask`) and per-sentence positions, so a packed sentence computes exactly what it
computes alone.

Shapes: B batch (rows), S source length (incl. EOS), T target length (incl. BOS or EOS), L a row's length.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from attnlab.core.errors import AttnlabError
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from attnlab.nn.attention import Segments


def example_costs(lengths) -> np.ndarray:
    """Per-example cost as an int32 array (4 bytes per example, as a corpus may have millions): the length itself, or max(src_len, tgt_len) for a pair. `lengths`: a
    sequence of lengths or of (src_len, tgt_len) pairs, or an integer array of shape (N,) or (N, 2)."""
    if isinstance(lengths, np.ndarray):
        arr = lengths
        if arr.dtype.kind not in "iu" or arr.ndim not in (1, 2) or (arr.ndim == 2 and arr.shape[1] != 2):
            raise AttnlabError(f"lengths: expected an integer array of shape (N,) or (N, 2), got {arr.dtype} "
                               f"{arr.shape}")
        costs = (arr.max(axis=1) if arr.ndim == 2 else arr).astype(np.int32)
        if len(costs) and costs.min() < 0:
            raise AttnlabError(f"lengths[{int(np.argmin(costs))}]: a length must be >= 0")
        return costs
    costs = []
    for i, x in enumerate(lengths):
        parts = tuple(x) if isinstance(x, (tuple, list)) else (x,)
        try:
            values = [operator.index(p) for p in parts]
        except TypeError:
            values = []
        if len(values) != (2 if isinstance(x, (tuple, list)) else 1) or min(values) < 0:
            raise AttnlabError(f"lengths[{i}] = {x!r}: expected a length >= 0 or a (src_len, tgt_len) pair")
        costs.append(max(values))
    return np.asarray(costs, dtype=np.int32)


class Batches:
    """A list of batches kept as two arrays (the example indices of all batches, one after another, and where
    each batch starts), so that an epoch of millions of examples costs no Python object per example.
    Iterating yields each batch as a list of ints."""

    def __init__(self, flat: np.ndarray, starts: np.ndarray, ids: np.ndarray | None = None) -> None:
        self.flat, self.starts = flat, starts  # starts: (num_batches + 1,)
        self.ids = np.arange(len(starts) - 1) if ids is None else ids  # the batches, in the order they are given

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, k: int) -> list[int]:
        b = int(self.ids[k])
        return self.flat[self.starts[b]:self.starts[b + 1]].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        return (self[k] for k in range(len(self)))

    def sizes(self) -> np.ndarray:
        return np.diff(self.starts)[self.ids]

    def reorder(self, ids: np.ndarray) -> Batches:
        return Batches(self.flat, self.starts, self.ids[ids])


def _split_to_multiple(batches: Batches, replicas: int) -> Batches:
    """Batches whose number is a multiple of `replicas`, each example still in exactly one batch: the last batches
    (in the given order) that hold two or more examples are halved, again and again, until the count divides.
    Only when no batch can be split further (one example each) are batches repeated cyclically, as
    DistributedSampler does."""
    if len(batches) % replicas == 0:
        return batches
    sizes = batches.sizes()  # (num_batches,) in the given order
    firsts = batches.starts[batches.ids]
    before = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = batches.flat[np.repeat(firsts - before, sizes) + np.arange(int(sizes.sum()))]  # examples in batch order
    parts = sizes.tolist()
    while len(parts) % replicas:
        need = (-len(parts)) % replicas
        halve = [k for k in range(len(parts) - 1, -1, -1) if parts[k] >= 2][:need]
        if not halve:
            break
        for k in halve:  # from the end: earlier positions stay valid
            parts[k:k + 1] = [parts[k] // 2, parts[k] - parts[k] // 2]
    out = Batches(flat, np.concatenate([[0], np.cumsum(parts)]).astype(np.int64))
    if len(out) % replicas:  # every batch a single example: repeat
        total = -(-len(out) // replicas) * replicas
        out = out.reorder(np.arange(total) % len(out))
    return out


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Batches of example indices whose padded size, len(batch) * longest example, is at most `max_tokens`.

    Each epoch the examples are sorted by length (ties broken randomly by (seed, epoch) when shuffling), cut
    greedily into batches under the budget, and the batch order is shuffled by (seed, epoch); the same
    (seed, epoch) always gives the same batches. An example longer than `max_tokens` forms a batch of its own
    (over budget) instead of being dropped, so every example appears exactly once per epoch. With shuffle=False
    the batches are length-sorted and the same every epoch (for evaluation); a batch's indices are original
    dataset indices, which `Seq2SeqBatch.indices` carries so outputs can be put back in order.

    Everything is computed with numpy from the lengths alone (`Batches`), so a corpus of millions of examples (a
    memory-mapped `attnlab.data.store`) is batched in a second or two and held as a few arrays.

    Distributed (num_replicas > 1): every rank needs the same number of batches, so when the epoch's batch count
    is not a multiple of num_replicas, the last batches of two or more examples are halved until it is
    (`_split_to_multiple`); rank r then takes batches r, r + num_replicas, ... The ranks read disjoint parts that
    together cover the epoch exactly once (only when every batch holds one example and their number does not
    divide are batches repeated).

    Args:
        lengths: per-example token counts, or (src_len, tgt_len) pairs whose max is the cost (count BOS/EOS
            yourself, e.g. `Seq2SeqDataset.lengths()`); a list or an integer array (N,) or (N, 2).
        max_tokens: token budget of one batch, padding included.
        shuffle: random tie order and batch order per epoch; False gives length-sorted batches.
        seed: base seed; the epoch's randomness depends on (seed, epoch) only.
        num_replicas / rank: data-parallel world size and this process's rank.
    """

    def __init__(self, lengths, max_tokens: int, *,
                 shuffle: bool = True, seed: int = 0, num_replicas: int = 1, rank: int = 0):
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens <= 0:
            raise AttnlabError(f"max_tokens ({max_tokens!r}) must be a positive integer")
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
            raise AttnlabError(f"num_replicas ({num_replicas!r}) must be an integer >= 1")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise AttnlabError(f"rank ({rank!r}) must be in [0, num_replicas ({num_replicas}))")
        self.costs = example_costs(lengths)
        self.max_tokens = int(max_tokens)
        self.shuffle, self.seed = shuffle, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = 0
        self._cache: tuple[int, Batches] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch whose batches `__iter__` yields (call before each epoch, as with DistributedSampler)."""
        self.epoch = epoch

    def _rng(self) -> np.random.Generator:
        # a string seed hashed with SHA-256: stable across processes and machines, distinct per (seed, epoch)
        digest = hashlib.sha256(f"attnlab-batching:{self.seed}:{self.epoch}".encode()).digest()
        return np.random.default_rng(np.frombuffer(digest, dtype=np.uint32))

    def _all_batches(self) -> Batches:
        """This epoch's batches for all replicas, before splitting and striding."""
        n = len(self.costs)
        rng = self._rng() if self.shuffle else None
        costs = self.costs
        index = np.int32 if n < 2**31 else np.int64  # example indices: 4 bytes each
        if rng is not None:  # ties in a random order: sort a random permutation stably by cost
            order = np.arange(n, dtype=index)
            rng.shuffle(order)
            order = order[np.argsort(costs[order], kind="stable")]
        else:
            order = np.argsort(costs, kind="stable").astype(index)
        sorted_costs = costs[order]
        starts = [0]
        M = self.max_tokens
        s = 0
        while s < n:
            # ascending costs: a batch [s, e) costs (e - s) * cost[e - 1]; take the largest e within the budget
            # (at least one example: an over-long example forms a batch of its own)
            k_max = min(n - s, max(M // max(int(sorted_costs[s]), 1), 1))
            window = sorted_costs[s:s + k_max]
            fits = np.arange(1, k_max + 1) * window.astype(np.int64) <= M
            k = max(int(np.argmin(fits)) if not fits.all() else k_max, 1)
            s += k
            starts.append(s)
        batches = Batches(order, np.asarray(starts, dtype=np.int64))
        if rng is not None:
            batches = batches.reorder(rng.permutation(len(batches)))
        return batches

    def _batches(self) -> Batches:
        """This rank's batches for the current epoch (cached per epoch)."""
        if self._cache is None or self._cache[0] != self.epoch:
            batches = _split_to_multiple(self._all_batches(), self.num_replicas)
            self._cache = (self.epoch, batches.reorder(np.arange(self.rank, len(batches), self.num_replicas)))
        return self._cache[1]

    def batches(self, start: int = 0) -> Batches:
        """This rank's batches of the current epoch from the `start`-th on (a resumed epoch)."""
        b = self._batches()
        return b.reorder(np.arange(min(start, len(b)), len(b)))

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


class RowPacker:
    """First-fit packing of examples into rows of at most `row_len` tokens on every side (for a pair, its source
    must fit the row's source side and its target the target side).

    The rows depend only on the order in which examples are added, so the batch sampler and the collate function
    can both pack a batch and get the same rows.

    Args:
        row_len: L, the most tokens a row holds (per side).
        max_rows: the most rows; `add` refuses an example that would need one more (None: unlimited).
        floor: no example to come is shorter than this on any side: a row with less room is closed (not scanned
            again), which changes no result and keeps first-fit fast.
    """

    def __init__(self, row_len: int, max_rows: int | None = None, floor: int = 1) -> None:
        self.row_len, self.max_rows, self.floor = row_len, max_rows, floor
        self.rows: list[list[int]] = []  # positions (in the order added) of the examples of each row
        self.used: list[list[int]] = []  # tokens used per row and side
        self.open: list[int] = []  # rows that may still take an example, in row order
        self.added = 0

    def add(self, cost: tuple[int, ...]) -> bool:
        """Puts the next example (its token count per side) in the first row with room; False if none has room
        and no row may be opened (an example longer than row_len opens a row of its own when one may)."""
        L = self.row_len
        for j, r in enumerate(self.open):
            used = self.used[r]
            if all(u + c <= L for u, c in zip(used, cost)):
                self.rows[r].append(self.added)
                used[:] = [u + c for u, c in zip(used, cost)]
                if any(L - u < self.floor for u in used):
                    del self.open[j]
                self.added += 1
                return True
        if self.max_rows is not None and len(self.rows) >= self.max_rows:
            return False
        self.rows.append([self.added])
        self.used.append(list(cost))
        if all(L - u >= self.floor for u in cost):
            self.open.append(len(self.rows) - 1)
        self.added += 1
        return True


def pack_rows(costs: Sequence[tuple[int, ...]], row_len: int) -> list[list[int]]:
    """The rows (lists of positions in `costs`) that `RowPacker` makes of examples added in this order."""
    packer = RowPacker(row_len)
    for cost in costs:
        packer.add(cost)
    return packer.rows


class PackedBatchSampler(TokenBudgetBatchSampler):
    """Batches for packed training. Each epoch the examples are shuffled (by (seed, epoch)), cut into chunks of
    `chunk` examples, and each chunk is packed first-fit decreasing (longest first) into rows of `row_len` tokens
    (`RowPacker`); the rows of the epoch are shuffled and grouped, max(1, max_tokens // row_len) per batch. A batch
    lists its examples row by row, so the first-fit replay of `collate_packed_seq2seq` / `LMTask.collate_packed`
    puts every example in its own row or an earlier one: never more rows than the batch was cut for. Every
    example appears exactly once per epoch; data-parallel splitting and striding are those of
    `TokenBudgetBatchSampler`. (First-fit runs in Python, about a second per 200,000 examples and epoch.)

    Args:
        lengths: (src_len, tgt_len) pairs or lengths, as for `TokenBudgetBatchSampler`.
        max_tokens: the token budget of one batch (rows x row_len).
        row_len: L; at least the longest example; 0: the longest example.
        chunk: examples packed together (larger: fuller rows, slower packing).
    """

    def __init__(self, lengths, max_tokens: int, row_len: int, *,
                 shuffle: bool = True, seed: int = 0, num_replicas: int = 1, rank: int = 0, chunk: int = 512):
        super().__init__(lengths, max_tokens, shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank)
        longest = int(self.costs.max()) if len(self.costs) else 0
        row_len = row_len or max(longest, 1)
        if row_len < longest:
            raise AttnlabError(f"the packed row length ({row_len}) is shorter than the longest example ({longest} "
                               "tokens): raise train.pack_length or leave it 0 (= the longest example)")
        self.row_len, self.chunk = row_len, chunk
        sides = lengths if isinstance(lengths, np.ndarray) else np.asarray(
            [tuple(x) if isinstance(x, (tuple, list)) else (x,) for x in lengths], dtype=np.int64)
        self.sides = sides.reshape(len(self.costs), -1)

    def _all_batches(self) -> Batches:
        rng = self._rng() if self.shuffle else None
        n = len(self.costs)
        order = rng.permutation(n) if rng is not None else np.arange(n)
        rows: list[list[int]] = []
        for start in range(0, n, self.chunk):
            part = order[start:start + self.chunk]
            part = part[np.argsort(-self.costs[part], kind="stable")].tolist()  # longest first, ties keep order
            sides = [tuple(x) for x in self.sides[part].tolist()]
            packer = RowPacker(self.row_len, floor=min(min(x) for x in sides))
            for cost in sides:
                packer.add(cost)
            rows += [[part[k] for k in row] for row in packer.rows]
        if rng is not None:
            rows = [rows[k] for k in rng.permutation(len(rows))]
        per_batch = max(1, self.max_tokens // self.row_len)
        flat, starts = [], [0]
        for b in range(0, len(rows), per_batch):
            flat.extend(i for row in rows[b:b + per_batch] for i in row)
            starts.append(len(flat))
        return Batches(np.asarray(flat, dtype=np.int64), np.asarray(starts, dtype=np.int64))


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> torch.LongTensor:
    """Right-pads token id lists into one (B, L) LongTensor, L the longest length (0 for no or empty seqs)."""
    out = torch.full((len(seqs), max((len(s) for s in seqs), default=0)), pad_id, dtype=torch.long)  # (B, L)
    for row, s in enumerate(seqs):
        if len(s):
            out[row, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


def pad_with_mask(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> tuple[torch.LongTensor, torch.Tensor]:
    """Right-padded ids (B, L) and their mask (B, L), True at real tokens."""
    tokens = pad_sequences(seqs, pad_id)  # (B, L)
    lengths = torch.tensor([len(s) for s in seqs])
    return tokens, torch.arange(tokens.size(1))[None, :] < lengths[:, None]  # (B, L)


@dataclass
class Seq2SeqBatch:
    """A padded seq2seq batch (pad id PAD_ID).

    The source gets EOS appended (JoeyNMT convention) and the target is shifted for teacher forcing:
    tgt_in = [BOS] + tgt, tgt_out = tgt + [EOS].

    Shape:
        src (B, S), src_lengths (B,) incl. EOS, tgt_in (B, T), tgt_out (B, T), indices (B,) dataset indices.
    """

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    indices: torch.Tensor
    src_segments: Segments | None = None  # packed batches only (`collate_packed_seq2seq`)
    tgt_segments: Segments | None = None

    @property
    def num_src_tokens(self) -> int:
        """Non-pad source tokens (EOS included)."""
        return int(self.src_lengths.sum())

    @property
    def num_tgt_tokens(self) -> int:
        """Non-pad target tokens (EOS included): the tokens the loss is summed over."""
        return int((self.tgt_out != PAD_ID).sum())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Seq2SeqBatch:
        """A copy with every tensor on `device`."""
        return Seq2SeqBatch(*(None if t is None else t.to(device, non_blocking=non_blocking) for t in
                              (self.src, self.src_lengths, self.tgt_in, self.tgt_out, self.indices,
                               self.src_segments, self.tgt_segments)))


class Seq2SeqDataset(Dataset):
    """Pre-tokenized parallel data (ids without BOS/EOS); item i is (i, src_ids[i], tgt_ids[i])."""

    def __init__(self, src_ids: list[list[int]], tgt_ids: list[list[int]]):
        if len(src_ids) != len(tgt_ids):
            raise AttnlabError(f"src_ids has {len(src_ids)} examples but tgt_ids has {len(tgt_ids)}")
        self.src_ids, self.tgt_ids = src_ids, tgt_ids

    def __len__(self) -> int:
        return len(self.src_ids)

    def __getitem__(self, index: int) -> tuple[int, list[int], list[int]]:
        return index, self.src_ids[index], self.tgt_ids[index]

    def lengths(self) -> list[tuple[int, int]]:
        """Per-example (S, T) as collated: len(src) + 1 (EOS) and len(tgt) + 1 (BOS or EOS)."""
        return [(len(s) + 1, len(t) + 1) for s, t in zip(self.src_ids, self.tgt_ids)]


def collate_seq2seq(examples: Sequence[tuple[int, Sequence[int], Sequence[int]]]) -> Seq2SeqBatch:
    """Collates (index, src, tgt) items of `Seq2SeqDataset` into a `Seq2SeqBatch` (a DataLoader collate_fn)."""
    src = [list(s) + [EOS_ID] for _, s, _ in examples]
    return Seq2SeqBatch(
        src=pad_sequences(src),  # (B, S)
        src_lengths=torch.tensor([len(s) for s in src], dtype=torch.long),  # (B,)
        tgt_in=pad_sequences([[BOS_ID] + list(t) for _, _, t in examples]),  # (B, T)
        tgt_out=pad_sequences([list(t) + [EOS_ID] for _, _, t in examples]),  # (B, T)
        indices=torch.tensor([i for i, _, _ in examples], dtype=torch.long),  # (B,)
    )


def collate_packed_seq2seq(examples: Sequence[tuple[int, Sequence[int], Sequence[int]]], row_len: int
                           ) -> Seq2SeqBatch:
    """Collates (index, src, tgt) items into packed rows of at most `row_len` tokens per side (`RowPacker`, in
    the order given: a `PackedBatchSampler` batch gives back its rows). Each sentence gets its EOS / BOS as in
    `collate_seq2seq`; src_lengths are the tokens used per row; indices list the examples in row order.

    Shape: src (B, S), tgt_in / tgt_out (B, T) with B rows, plus src_segments (B, S) and tgt_segments (B, T).
    """
    rows = pack_rows([(len(s) + 1, len(t) + 1) for _, s, t in examples], row_len)
    src = [[tok for k in row for tok in [*examples[k][1], EOS_ID]] for row in rows]
    tgt_in = [[tok for k in row for tok in [BOS_ID, *examples[k][2]]] for row in rows]
    tgt_out = [[tok for k in row for tok in [*examples[k][2], EOS_ID]] for row in rows]
    return Seq2SeqBatch(
        src=pad_sequences(src),  # (B, S)
        src_lengths=torch.tensor([len(s) for s in src], dtype=torch.long),  # (B,)
        tgt_in=pad_sequences(tgt_in),  # (B, T)
        tgt_out=pad_sequences(tgt_out),  # (B, T)
        indices=torch.tensor([examples[k][0] for row in rows for k in row], dtype=torch.long),  # (N,)
        src_segments=Segments.of_rows([[len(examples[k][1]) + 1 for k in row] for row in rows]),
        tgt_segments=Segments.of_rows([[len(examples[k][2]) + 1 for k in row] for row in rows]),
    )


def padding_fraction(batches: Sequence[Seq2SeqBatch]) -> float:
    """The share of padding among the source and target positions of seq2seq batches."""
    real = sum(int(b.src_lengths.sum()) + b.num_tgt_tokens for b in batches)
    total = sum(b.src.numel() + b.tgt_out.numel() for b in batches)
    return 1.0 - real / max(total, 1)


def make_loader(dataset: Seq2SeqDataset, max_tokens: int, shuffle: bool = True, seed: int = 0,
                num_workers: int = 0, *, num_replicas: int = 1, rank: int = 0,
                pin_memory: bool = False) -> DataLoader:
    """A DataLoader of `Seq2SeqBatch`es under a token budget. Call `loader.batch_sampler.set_epoch(e)` before
    each epoch to get that epoch's batches."""
    sampler = TokenBudgetBatchSampler(dataset.lengths(), max_tokens, shuffle=shuffle, seed=seed,
                                      num_replicas=num_replicas, rank=rank)
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_seq2seq, num_workers=num_workers,
                      pin_memory=pin_memory)
