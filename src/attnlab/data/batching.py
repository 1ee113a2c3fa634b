"""Token-budget batching for seq2seq training (fairseq's `max_tokens`): length buckets cut under a padded-token
budget, a seq2seq dataset of pre-tokenized pairs, and its collate function.

Packing (`train.pack`): instead of one sentence per row, several sentences share a row, first-fit, so that a
batch is nearly free of padding without sorting by length. `Segments` says which sentence of its row each token
belongs to and its position inside that sentence; the model turns them into block-diagonal attention masks
(`attnlab.nn.attention.segment_mask`) and per-sentence positions, so a packed sentence computes exactly what it
computes alone.

A fixed grid of shapes (`train.length_multiple` m > 0): every example's cost is rounded up to a multiple of m, its
grid length L; a batch holds examples of one grid length only, max(1, max_tokens // L) of them (the last batch of
each length the rest), and both sides are padded to L. A run then meets at most two shapes per grid length, the same
every epoch (`TokenBudgetBatchSampler.grid_batches`): a GPU pays the cost of a new shape (kernel choice, compiled
graphs) a few dozen times, early, or before the clock in the trainer's warm-up, instead of at every new length.

Shapes: B batch (rows), S source length (incl. EOS), T target length (incl. BOS or EOS), L a row's length.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, Sampler

from attnlab.core.errors import AttnlabError
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from attnlab.nn.attention import Segments

log = logging.getLogger("attnlab")


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


def grid_length(cost, multiple: int):
    """A cost (an int or an integer array) rounded up to the grid: the smallest multiple of `multiple` >= cost, at
    least `multiple` (an empty example still takes one grid step)."""
    return np.maximum(-(-np.asarray(cost, dtype=np.int64) // multiple) * multiple, multiple)


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Batches of example indices whose padded size, len(batch) * longest example, is at most `max_tokens`.

    Each epoch the examples are sorted by length (ties broken randomly by (seed, epoch) when shuffling), cut
    greedily into batches under the budget, and the batch order is shuffled by (seed, epoch); the same
    (seed, epoch) always gives the same batches. An example longer than `max_tokens` forms a batch of its own
    (over budget) instead of being dropped, so every example appears exactly once per epoch. With
    `length_multiple` m > 0 the cut follows the grid of the module docstring instead: the examples of each grid
    length L in batches of exactly max(1, max_tokens // L), the rest of that length in one smaller batch, so the
    batch shapes are fixed by the lengths alone (`grid_batches`). With shuffle=False
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
        length_multiple: m, the grid (0: no grid, batches cut by the exact lengths).
    """

    def __init__(self, lengths, max_tokens: int, *, shuffle: bool = True, seed: int = 0, num_replicas: int = 1,
                 rank: int = 0, length_multiple: int = 0):
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens <= 0:
            raise AttnlabError(f"max_tokens ({max_tokens!r}) must be a positive integer")
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
            raise AttnlabError(f"num_replicas ({num_replicas!r}) must be an integer >= 1")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise AttnlabError(f"rank ({rank!r}) must be in [0, num_replicas ({num_replicas}))")
        if isinstance(length_multiple, bool) or not isinstance(length_multiple, int) or length_multiple < 0:
            raise AttnlabError(f"length_multiple ({length_multiple!r}) must be an integer >= 0 (0: no grid)")
        self.length_multiple = length_multiple
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
        if self.length_multiple:
            starts = self._grid_starts(sorted_costs)
        else:
            starts = self._budget_starts(sorted_costs)
        batches = Batches(order, np.asarray(starts, dtype=np.int64))
        if rng is not None:
            batches = batches.reorder(rng.permutation(len(batches)))
        return batches

    def _budget_starts(self, sorted_costs: np.ndarray) -> list[int]:
        """Where each batch starts in the ascending costs: as many examples as fit the budget."""
        n, M = len(sorted_costs), self.max_tokens
        starts = [0]
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
        return starts

    def _grid_starts(self, sorted_costs: np.ndarray) -> list[int]:
        """Where each batch starts in the ascending costs on the grid: each grid length's examples in batches of
        max(1, max_tokens // L), its last batch the rest; no batch mixes two grid lengths."""
        grid = grid_length(sorted_costs, self.length_multiple)  # (n,) ascending
        edges = [0, *(np.flatnonzero(np.diff(grid)) + 1).tolist(), len(grid)]
        starts = []
        for lo, hi in zip(edges[:-1], edges[1:]):
            starts.extend(range(lo, hi, max(1, self.max_tokens // int(grid[lo]))))
        return starts + [len(grid)]

    def grid_batches(self) -> list[list[int]]:
        """One batch of example indices of each shape the grid gives (`length_multiple` > 0; else []), shortest
        first: for each grid length L, max(1, max_tokens // L) examples of that length, and the rest of its
        examples when they do not divide. Every epoch's batches have these shapes only (with num_replicas > 1,
        the halving that evens the ranks out may add a few). The examples are the first of each length in the
        dataset: no randomness is drawn."""
        if not self.length_multiple or not len(self.costs):
            return []
        grid = grid_length(self.costs, self.length_multiple)  # (N,)
        out = []
        for L in np.unique(grid).tolist():
            members = np.flatnonzero(grid == L)  # (g,) in dataset order
            rows = max(1, self.max_tokens // L)
            sizes = ([rows] if len(members) >= rows else []) + ([len(members) % rows] if len(members) % rows else [])
            out += [members[:k].tolist() for k in sizes]
        return out

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


def training_batches(task, lengths, max_tokens: int, *, pack: bool = False, pack_length: int = 0,
                     length_multiple: int = 0, seed: int = 0, num_replicas: int = 1, rank: int = 0
                     ) -> tuple[TokenBudgetBatchSampler, Callable[[list], Any]]:
    """The batch sampler and collate function of a training run, from the train keys of the same names:
    length-bucketed token-budget batches (on the grid with length_multiple), or packed rows (pack) for a task that
    can pack. `task`: the trainer's task (`attnlab.training.trainer.Task`: `collate`, and `collate_packed` /
    `collate_grid` where it has them). Rank 0 warns of examples over the budget."""
    grid = {"length_multiple": length_multiple} if length_multiple else {}
    if grid and not hasattr(task, "collate_grid"):
        raise AttnlabError(f"train.length_multiple: the batches of {type(task).__name__} cannot be padded to a grid "
                           "of shapes; set train.length_multiple = 0")
    if not pack:
        sampler = TokenBudgetBatchSampler(lengths, max_tokens, shuffle=True, seed=seed, num_replicas=num_replicas,
                                          rank=rank, **grid)
        over = int((sampler.costs > max_tokens).sum())
        if over and rank == 0:  # kept, not dropped: each is a batch of its own
            log.warning("%s of %s training examples cost more than train.max_tokens (%d tokens): each is a batch "
                        "of its own, over the budget (the longest costs %d)", f"{over:,}", f"{len(sampler.costs):,}",
                        max_tokens, int(sampler.costs.max()))
        return sampler, functools.partial(task.collate_grid, **grid) if grid else task.collate
    if not hasattr(task, "collate_packed"):
        raise AttnlabError(f"train.pack: the examples of {type(task).__name__} cannot be packed; "
                           "set train.pack = false")
    sampler = PackedBatchSampler(lengths, max_tokens, pack_length, shuffle=True, seed=seed,
                                 num_replicas=num_replicas, rank=rank)
    log.info("packed batches: rows of %d tokens, %d rows per batch", sampler.row_len,
             max(1, max_tokens // sampler.row_len))
    return sampler, functools.partial(task.collate_packed, row_len=sampler.row_len, **grid)


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID, length: int = 0) -> torch.LongTensor:
    """Right-pads token id lists into one (B, L) LongTensor, L the longest length (0 for no or empty seqs), or
    `length` when that is longer (a grid's length)."""
    out = torch.full((len(seqs), max(length, max((len(s) for s in seqs), default=0))), pad_id,
                     dtype=torch.long)  # (B, L)
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
    tgt_count: int | None = None  # non-pad target tokens, counted on the host by the collate functions

    @property
    def num_src_tokens(self) -> int:
        """Non-pad source tokens (EOS included)."""
        return int(self.src_lengths.sum())

    @property
    def num_tgt_tokens(self) -> int:
        """Non-pad target tokens (EOS included): the tokens the loss is summed over. Counted when the batch was
        collated, on the host: the trainer asks it every update, and counting a batch on a GPU would wait for it."""
        return int((self.tgt_out != PAD_ID).sum()) if self.tgt_count is None else self.tgt_count

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Seq2SeqBatch:
        """A copy with every tensor on `device`."""
        return Seq2SeqBatch(*(None if t is None else t.to(device, non_blocking=non_blocking) for t in
                              (self.src, self.src_lengths, self.tgt_in, self.tgt_out, self.indices,
                               self.src_segments, self.tgt_segments)), tgt_count=self.tgt_count)


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


def collate_seq2seq(examples: Sequence[tuple[int, Sequence[int], Sequence[int]]], length_multiple: int = 0
                    ) -> Seq2SeqBatch:
    """Collates (index, src, tgt) items of `Seq2SeqDataset` into a `Seq2SeqBatch` (a DataLoader collate_fn). With
    `length_multiple` m > 0 both sides are padded to the batch's grid length (the longest side rounded up to a
    multiple of m: S = T = L), as the grid of `TokenBudgetBatchSampler` batches them."""
    src = [list(s) + [EOS_ID] for _, s, _ in examples]
    tgt_lengths = [len(t) + 1 for _, _, t in examples]
    L = int(grid_length(max(max((len(s) for s in src), default=0), max(tgt_lengths, default=0)),
                        length_multiple)) if length_multiple else 0
    return Seq2SeqBatch(
        src=pad_sequences(src, length=L),  # (B, S)
        src_lengths=torch.tensor([len(s) for s in src], dtype=torch.long),  # (B,)
        tgt_in=pad_sequences([[BOS_ID] + list(t) for _, _, t in examples], length=L),  # (B, T)
        tgt_out=pad_sequences([list(t) + [EOS_ID] for _, _, t in examples], length=L),  # (B, T)
        indices=torch.tensor([i for i, _, _ in examples], dtype=torch.long),  # (B,)
        tgt_count=sum(tgt_lengths),
    )


def collate_packed_seq2seq(examples: Sequence[tuple[int, Sequence[int], Sequence[int]]], row_len: int,
                           length_multiple: int = 0) -> Seq2SeqBatch:
    """Collates (index, src, tgt) items into packed rows of at most `row_len` tokens per side (`RowPacker`, in
    the order given: a `PackedBatchSampler` batch gives back its rows). Each sentence gets its EOS / BOS as in
    `collate_seq2seq`; src_lengths are the tokens used per row; indices list the examples in row order. With
    `length_multiple` m > 0 both sides are padded to row_len rounded up to a multiple of m: one length for every
    batch (the number of rows still follows first-fit).

    Shape: src (B, S), tgt_in / tgt_out (B, T) with B rows, plus src_segments (B, S) and tgt_segments (B, T).
    """
    rows = pack_rows([(len(s) + 1, len(t) + 1) for _, s, t in examples], row_len)
    src = [[tok for k in row for tok in [*examples[k][1], EOS_ID]] for row in rows]
    tgt_in = [[tok for k in row for tok in [BOS_ID, *examples[k][2]]] for row in rows]
    tgt_out = [[tok for k in row for tok in [*examples[k][2], EOS_ID]] for row in rows]
    L = int(grid_length(row_len, length_multiple)) if length_multiple else 0
    return Seq2SeqBatch(
        src=pad_sequences(src, length=L),  # (B, S)
        src_lengths=torch.tensor([len(s) for s in src], dtype=torch.long),  # (B,)
        tgt_in=pad_sequences(tgt_in, length=L),  # (B, T)
        tgt_out=pad_sequences(tgt_out, length=L),  # (B, T)
        indices=torch.tensor([examples[k][0] for row in rows for k in row], dtype=torch.long),  # (N,)
        src_segments=_segments([[len(examples[k][1]) + 1 for k in row] for row in rows], L),
        tgt_segments=_segments([[len(examples[k][2]) + 1 for k in row] for row in rows], L),
        tgt_count=sum(len(t) + 1 for _, _, t in examples),
    )


def _segments(rows: list[list[int]], length: int) -> Segments:
    """`Segments.of_rows(rows)` padded (id 0: padding) to `length` columns when that is longer."""
    seg = Segments.of_rows(rows)
    extra = length - seg.ids.size(1)
    return seg if extra <= 0 else Segments(F.pad(seg.ids, (0, extra)), F.pad(seg.pos, (0, extra)))


def padding_fraction(batches: Sequence[Seq2SeqBatch]) -> float:
    """The share of padding among the source and target positions of seq2seq batches."""
    real = sum(int(b.src_lengths.sum()) + b.num_tgt_tokens for b in batches)
    total = sum(b.src.numel() + b.tgt_out.numel() for b in batches)
    return 1.0 - real / max(total, 1)
