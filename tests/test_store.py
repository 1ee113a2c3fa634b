"""The prepared corpus (`attnlab.data.store`): the memory-mapped store holds exactly what an in-memory dataset of the same
pairs holds (items, batches, training losses); a run killed mid-epoch resumes bit-exactly from it; a prepare killed
at any point leaves nothing that opens as a store and the next prepare builds it whole; two ranks read disjoint
parts of an epoch; every input format gives the same store; damage is a one-line error; malformed lines, filters,
changed inputs and two concurrent prepares behave as documented. Every store lives under tmp_path (data.store, or
$ATTNLAB_CACHE pointed there)."""

import bz2
import contextlib
import gzip
import hashlib
import json
import lzma
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_pairs

from attnlab.app.cli import main as cli_main
from attnlab.core.errors import AttnlabError
from attnlab.core.logs import read_metrics
from attnlab.data import prepare as prepare_mod
from attnlab.data.batching import Seq2SeqDataset, TokenBudgetBatchSampler
from attnlab.data.corpus import read_pairs
from attnlab.data.prepare import prepare
from attnlab.data.spec import StoreSpec
from attnlab.data.store import StoreDataset, open_store
from attnlab.families.translation import (
    build_translation_model,
    experiment_from_dict,
    load_experiment,
    prepare_corpus,
    store_spec,
)
from attnlab.runs.workflow import train
from attnlab.training.trainer import Trainer

SUBPROCESS_TIMEOUT = 120


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Nothing reaches the user's cache: stores without data.store (and crash reports) go under tmp_path."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _paths(spec) -> list[str]:
    if spec is None:
        return []
    if isinstance(spec, (tuple, list)):
        return [str(p) for p in spec]
    return [str(spec)]


def config(train, dev=None, test=None, store="", family="rnn", tokenizer=None, train_keys=None, **data):
    """A tiny translation config of the given files (char tokenizer unless told)."""
    model = ({"rnn": {"cell": "gru", "emb_dim": 16, "hidden_dim": 32, "attention": "bahdanau", "dropout": 0.1}}
             if family == "rnn" else
             {"family": "transformer", "transformer": {"d_model": 32, "h": 2, "d_ff": 64, "enc_layers": 1,
                                                       "dec_layers": 1, "dropout": 0.1, "norm": "pre"}})
    return experiment_from_dict({
        "data": {"corpus": "files", "train": _paths(train), "dev": _paths(dev), "test": _paths(test),
                 "store": str(store), **data},
        "tokenizer": tokenizer or {"kind": "char"},
        "model": model,
        "train": {"max_steps": 20, "max_tokens": 600, "lr": 0.005, "eval_every": 20, "log_every": 1, "seed": 3,
                  "progress": False, "keep_last": 1, "eval_bleu": False, "device": "cpu", **(train_keys or {})},
    })


def write_config(path: Path, tiny_dir: Path, store: Path | str = "", **train_keys) -> Path:
    """The TOML of `config(tiny_dir/train.tsv, dev, test)`: what `attnlab train` / `attnlab data prepare` read."""
    keys = {"max_steps": 20, "max_tokens": 600, "lr": 0.005, "eval_every": 20, "eval_bleu": "false",
            "log_every": 1, "seed": 3, "num_threads": 1, "progress": "false", "device": '"cpu"', **train_keys}
    path.write_text(f"""
[data]
corpus = "files"
train = {json.dumps([str(tiny_dir / 'train.tsv')])}
dev = {json.dumps([str(tiny_dir / 'dev.tsv')])}
test = {json.dumps([str(tiny_dir / 'test.tsv')])}
store = {json.dumps(str(store))}
[tokenizer]
kind = "char"
[model.rnn]
cell = "gru"
emb_dim = 16
hidden_dim = 32
attention = "bahdanau"
dropout = 0.1
[train]
""" + "".join(f"{k} = {v}\n" for k, v in keys.items()), encoding="utf-8")
    return path


def tiny_files(tiny_tsv):
    return tiny_tsv / "train.tsv", tiny_tsv / "dev.tsv", tiny_tsv / "test.tsv"


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def store_files(path: Path) -> dict:
    """What a store holds, byte for byte, apart from its manifest: train.bin, train.idx, dev/test TSV and the
    tokenizer files."""
    path = Path(path)
    files = ["train.bin", "train.idx", "dev.tsv", "test.tsv"]
    files += sorted(str(p.relative_to(path)) for p in (path / "tokenizer").iterdir())
    return {name: sha256(path / name) for name in files}


def debris(place: Path) -> list[Path]:
    """Staging folders a prepare of `place` leaves when it dies before its rename."""
    return sorted(place.parent.glob(f".{place.name}.tmp-*"))


@pytest.fixture(scope="module")
def clean_store(tiny_tsv, tmp_path_factory):
    """A store of the tiny synthetic corpus (char tokenizer), prepared once without interference."""
    place = tmp_path_factory.mktemp("clean") / "store"
    return prepare(store_spec(config(*tiny_files(tiny_tsv))), place)


def assert_same_as_clean(store, clean, same_key: bool = True) -> None:
    """`store` is complete, checks out and holds what the clean store holds."""
    assert (open_store(store.path, verify=True).key == clean.key) == same_key
    for k in ("bin_sha256", "idx_sha256", "pairs", "tokens", "dtype"):
        assert store.manifest["train"][k] == clean.manifest["train"][k], k
    assert store.manifest["tokenizer_sha256"] == clean.manifest["tokenizer_sha256"]
    assert store_files(store.path) == store_files(clean.path)
    assert sha256(store.path / "train.bin") == clean.manifest["train"]["bin_sha256"]  # the manifest tells the truth
    assert sha256(store.path / "train.idx") == clean.manifest["train"]["idx_sha256"]


# ---------------------------------------------------------------------------------------------- a. equal to memory
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_the_store_gives_the_items_batches_and_losses_of_an_in_memory_dataset(tiny_tsv, tmp_path, family):
    cfg = config(*tiny_files(tiny_tsv), store=tmp_path / "store", family=family)
    store = prepare_corpus(cfg)
    assert store.path == tmp_path / "store"
    # the training pairs read independently of the store: plain tab-separated lines (nothing to normalise), which
    # the in-memory reader agrees with
    srcs, tgts = zip(*(line.split("\t") for line in (tiny_tsv / "train.tsv").read_text("utf-8").splitlines()))
    srcs, tgts = list(srcs), list(tgts)
    assert [(p.src, p.tgt) for p in read_pairs(tiny_tsv / "train.tsv")[0]] == list(zip(srcs, tgts))
    toks = store.tokenizers()
    memory = Seq2SeqDataset(toks.src.encode_batch(srcs), toks.tgt.encode_batch(tgts))
    mapped = store.train_data()
    assert isinstance(mapped, StoreDataset) and len(mapped) == len(memory) == 1500
    for i in range(len(memory)):
        assert mapped[i] == memory[i], i
    assert [(p.src, p.tgt) for p in store.pairs("train")] == list(zip(srcs, tgts))  # char ids decode losslessly
    np.testing.assert_array_equal(mapped.lengths(), np.asarray(memory.lengths()))
    for shuffle in (True, False):
        for epoch in (0, 1):
            a = TokenBudgetBatchSampler(mapped.lengths(), 600, shuffle=shuffle, seed=3)
            b = TokenBudgetBatchSampler(memory.lengths(), 600, shuffle=shuffle, seed=3)
            a.set_epoch(epoch)
            b.set_epoch(epoch)
            assert list(a) == list(b)
    dev_pairs = store.pairs("dev")
    dev = Seq2SeqDataset(toks.src.encode_batch([p.src for p in dev_pairs]),
                         toks.tgt.encode_batch([p.tgt for p in dev_pairs]))
    runs = {}
    for name, data in (("memory", memory), ("store", mapped)):
        torch.manual_seed(cfg.train.seed)
        model = build_translation_model(cfg.model, toks.src.vocab_size, toks.tgt.vocab_size)
        Trainer(model, cfg.train, data, dev, tmp_path / name).fit()
        runs[name] = [r["loss"] for r in read_metrics(tmp_path / name) if "loss" in r], model.state_dict()
    losses = runs["memory"][0]
    assert len(losses) == 20 and all(math.isfinite(x) for x in losses)
    assert runs["store"][0] == losses  # exactly: the same ids in the same batches
    for k, v in runs["memory"][1].items():
        assert torch.equal(runs["store"][1][k], v), k


# ---------------------------------------------------------------------------------------------- b. killed mid-epoch
def test_a_run_killed_mid_epoch_resumes_bit_exactly_from_its_store(tiny_tsv, tmp_path, private_cache):
    """`attnlab train` killed with SIGKILL inside its first epoch (batch_in_epoch > 0 in the checkpoint it resumes
    from), resumed, ends with the weights and logged loss of an uninterrupted run; all of it trained from the store
    in data.store, which the resume and the second run reuse without rebuilding."""
    from safetensors.torch import load_file

    store_dir = tmp_path / "store"
    # max_tokens 300: about 120 batches per epoch, a checkpoint every 5 steps
    cfg_path = write_config(tmp_path / "c.toml", tiny_tsv, store_dir, max_tokens=300, eval_every=5, log_every=5,
                            max_steps=1000, keep_last=3)
    killed = tmp_path / "killed"
    latest = killed / "checkpoints" / "latest.json"
    with open(tmp_path / "killed.log", "w") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "attnlab.app.cli", "train", str(cfg_path), "--out", str(killed)],
                                stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT
        while proc.poll() is None and not (latest.is_file() and json.loads(latest.read_text())["step"] >= 5):
            assert time.monotonic() < deadline, "no checkpoint at step 5 in time"
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()
    pointer = json.loads(latest.read_text())
    at_kill = pointer["step"]
    state = json.loads((killed / "checkpoints" / f"{pointer['name']}.json").read_text())
    store = open_store(store_dir, verify=True)
    sampler = TokenBudgetBatchSampler(store.train_data().lengths(), 300, seed=3)
    assert state["epoch"] == 0 and 0 < state["batch_in_epoch"] == at_kill < len(sampler)  # mid-epoch
    log_text = (tmp_path / "killed.log").read_text()
    assert f"prepared store {store_dir}" in log_text  # it trained from that store
    assert not (private_cache / "stores").exists()  # and from no other
    manifest_stat = (store_dir / "store.json").stat()

    target = at_kill + 5
    train(None, killed, resume=True, overrides=[f"train.max_steps={target}"])
    train(load_experiment(cfg_path, [f"train.max_steps={target}"]), tmp_path / "straight")
    a = load_file(str(tmp_path / "straight" / "checkpoints" / f"step_{target:08d}.safetensors"))
    b = load_file(str(killed / "checkpoints" / f"step_{target:08d}.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0, msg=k)

    def last_loss(run):
        return [(r["step"], r["loss"]) for r in read_metrics(run) if "loss" in r][-1]

    assert last_loss(killed) == last_loss(tmp_path / "straight") and last_loss(killed)[0] == target
    after = (store_dir / "store.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (manifest_stat.st_ino, manifest_stat.st_mtime_ns)  # reused
    assert not (private_cache / "stores").exists()


# ---------------------------------------------------------------------------------------------- c. killed prepares
class Killed(BaseException):
    """Stands for SIGKILL at a write boundary: no `except Exception` below catches it."""


def _kill(*args, **kwargs):
    raise Killed


def _kill_after(original, calls: int = 1):
    """`original`, which kills the process once it has completed `calls` calls."""
    done = []

    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        done.append(1)
        if len(done) >= calls:
            raise Killed
        return result
    return wrapper


def _kill_before(original, call: int):
    """`original`, which kills the process instead of making its `call`-th call."""
    made = []

    def wrapper(*args, **kwargs):
        made.append(1)
        if len(made) >= call:
            raise Killed
        return original(*args, **kwargs)
    return wrapper


class _DeadProcessOs:
    """`os` for store.py during a prepare that gets killed: another process id than this test's (the next prepare,
    here in the same process, must not mistake the dead one's staging folder for its own), and optionally a rename
    of the staging folder into its place that dies before it happens (after an outdated store there has been moved
    aside)."""

    kill_rename = False

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def getpid():
        return 999_999

    def rename(self, src, dst):
        if self.kill_rename and ".tmp-" in Path(src).name and "tmp-old" not in Path(src).name:
            raise Killed
        return os.rename(src, dst)


BOUNDARIES = {
    "pass 1 read, nothing selected": lambda m: m.setattr(prepare_mod._Build, "select", _kill),
    "tokenizer saved": lambda m: m.setattr(prepare_mod, "save_tokenizers", _kill_after(prepare_mod.save_tokenizers)),
    "dev.tsv written, test.tsv not": lambda m: m.setattr(prepare_mod, "atomic_write_text",
                                                         _kill_after(prepare_mod.atomic_write_text)),
    "train.bin half written": lambda m: (m.setattr(prepare_mod, "_CHUNK", 100),
                                         m.setattr(prepare_mod, "_encode_chunk",
                                                   _kill_before(prepare_mod._encode_chunk, 8))),
    "encoded, manifest not written": lambda m: m.setattr(prepare_mod, "write_json", _kill),
    "manifest written, not renamed": lambda m: m.setattr(prepare_mod, "write_json",
                                                         _kill_after(prepare_mod.write_json)),
    "rename into place": lambda m: m.setattr(prepare_mod.os, "kill_rename", True),
}


@pytest.mark.parametrize("outdated", [False, True], ids=["empty place", "outdated store in place"])
@pytest.mark.parametrize("boundary", list(BOUNDARIES))
def test_a_prepare_killed_at_a_write_boundary_leaves_no_half_store(tiny_tsv, tmp_path, monkeypatch, clean_store,
                                                                     boundary, outdated):
    place = tmp_path / "store"
    spec = store_spec(config(*tiny_files(tiny_tsv)))
    old_key = None
    if outdated:  # a complete store of other settings at the place: replaced only once the new one is complete
        old_key = prepare(store_spec(config(*tiny_files(tiny_tsv), max_words=5)), place).key
    with monkeypatch.context() as m:
        m.setattr(prepare_mod, "_remove", lambda path: None)  # a killed process cleans nothing up
        m.setattr(prepare_mod, "os", _DeadProcessOs())
        BOUNDARIES[boundary](m)
        with pytest.raises(Killed):
            prepare(spec, place)
    assert any(p.name.endswith(".tmp-999999") for p in debris(place)), "the kill leaves its staging folder"
    if outdated:
        try:
            found = open_store(place, verify=True)
        except AttnlabError as e:  # moved aside, the new one not yet in place
            assert "rebuild" in str(e)
        else:
            assert found.key == old_key  # the old store, whole
    else:
        with pytest.raises(AttnlabError, match="rebuild"):
            open_store(place)
        assert not (place / "store.json").exists()
    store = prepare(spec, place)
    assert store.path == place and store.key == clean_store.key
    assert_same_as_clean(store, clean_store)
    assert debris(place) == []  # what the killed prepare left is gone


def test_a_prepare_killed_by_sigkill_at_a_random_time_is_rebuilt_whole(tiny_tsv, tmp_path, clean_store, capsys):
    """A real SIGKILL of `attnlab data prepare` while it encodes (slowed down to 30 chunks of 50 ms), at a seeded
    random moment; then `attnlab data prepare` again gives the complete store."""
    place = tmp_path / "store"
    cfg_path = write_config(tmp_path / "c.toml", tiny_tsv)
    script = f"""
import sys, time
import attnlab.data.prepare as prep
from attnlab.app.cli import main
prep._CHUNK = 50
encode = prep._encode_chunk
def slow(task):
    time.sleep(0.05)
    return encode(task)
prep._encode_chunk = slow
sys.exit(main(["data", "prepare", {str(cfg_path)!r}, "--out", {str(place)!r}]))
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT
        while not debris(place):
            assert proc.poll() is None and time.monotonic() < deadline, "the prepare never started building"
            time.sleep(0.005)
        time.sleep(random.Random(20).uniform(0.0, 1.0))
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    if (place / "store.json").is_file():  # the kill came after the rename (not expected: the encoding takes 1.5 s)
        assert_same_as_clean(open_store(place), clean_store)
    else:
        with pytest.raises(AttnlabError, match="rebuild"):
            open_store(place)
        assert debris(place)
    assert cli_main(["data", "prepare", str(cfg_path), "--out", str(place)]) == 0
    assert "1,500" in capsys.readouterr().out
    assert_same_as_clean(open_store(place), clean_store)
    assert debris(place) == []


def test_reading_and_encoding_on_two_workers_give_the_same_store(tiny_tsv, tmp_path, monkeypatch, clean_store):
    monkeypatch.setattr(prepare_mod, "_PARALLEL_MIN_PAIRS", 0)  # the worker pool even for 1,500 pairs
    monkeypatch.setattr(prepare_mod, "_PARALLEL_MIN_BYTES", 0)  # and the reading pool for a small file
    monkeypatch.setattr(prepare_mod, "_CHUNK", 97)  # chunks spread over both workers, results in order
    monkeypatch.setattr(prepare_mod, "_READ_CHUNK", 89)
    store = prepare(store_spec(config(*tiny_files(tiny_tsv))), tmp_path / "store", workers=2)
    assert store.manifest["train"]["encode_workers"] == 2
    assert_same_as_clean(store, clean_store)


def test_a_malformed_line_found_by_a_reading_worker_is_the_same_clean_error(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare_mod, "_PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(prepare_mod, "_READ_CHUNK", 7)
    bad = tmp_path / "bad.tsv"
    bad.write_text("".join(f"a{i} b\tc{i} d\n" for i in range(30)) + "no tab here\n" + "x\ty\n" * 30)
    spec = StoreSpec(corpus="files", train=[str(bad)], dev_size=2, test_size=2)
    with pytest.raises(AttnlabError, match=r"bad\.tsv:31: expected 2 tab-separated fields"):
        prepare(spec, tmp_path / "store", workers=2)
    assert not (tmp_path / "store").exists() and not list(tmp_path.glob(".store.tmp-*"))


# ---------------------------------------------------------------------------------------------- d. two ranks
def _check_two_ranks(full, ranks, n) -> None:
    """Ranks of equal batch counts that together read every example once (when the batches can be split to an
    even count; else the one batch the sampler repeats)."""
    assert len(ranks[0]) == len(ranks[1]) == math.ceil(len(full) / 2)
    seen = Counter(i for batches in ranks for b in batches for i in b)
    assert set(seen) == set(range(n))
    if n >= 2 * math.ceil(len(full) / 2):
        assert all(c == 1 for c in seen.values())  # disjoint and complete
    else:  # an odd number of single-example batches: one of them is read twice
        assert sum(seen.values()) == n + 1 and all(len(b) == 1 for b in full)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1500])
def test_two_ranks_read_disjoint_parts_that_cover_the_epoch(tiny_tsv, tmp_path, n):
    cfg = config(*tiny_files(tiny_tsv), store=tmp_path / "store", max_train_pairs=0 if n == 1500 else n)
    data = prepare_corpus(cfg).train_data()
    assert len(data) == n
    lengths = data.lengths()
    for max_tokens in (40, 300, 1000):  # 40: mostly one pair per batch; 1000: many
        for epoch in (0, 1, 2):
            samplers = [TokenBudgetBatchSampler(lengths, max_tokens, seed=5, num_replicas=R, rank=r)
                        for R, r in ((1, 0), (2, 0), (2, 1))]
            for s in samplers:
                s.set_epoch(epoch)
            full, *ranks = (list(s) for s in samplers)
            _check_two_ranks(full, ranks, n)
            for b in (b for batches in ranks for b in batches):
                assert len(b) == 1 or len(b) * int(lengths[b].max()) <= max_tokens


RANK_SCRIPT = """
import json, sys
import torch.distributed as dist
from torch.utils.data import DataLoader
from attnlab.data.batching import TokenBudgetBatchSampler, collate_seq2seq
from attnlab.data.store import open_store
rank, store_dir, max_tokens, init, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
data = open_store(store_dir).train_data()
sampler = TokenBudgetBatchSampler(data.lengths(), max_tokens, seed=3, num_replicas=2, rank=rank)
read = []
for epoch in (0, 1):
    sampler.set_epoch(epoch)
    loader = DataLoader(data, batch_sampler=sampler.batches(0), collate_fn=collate_seq2seq)
    read.append([batch.indices.tolist() for batch in loader])
gathered = [None, None]
dist.all_gather_object(gathered, read)
if rank == 0:
    with open(out, "w") as f:
        json.dump(gathered, f)
dist.destroy_process_group()
"""


def test_two_gloo_processes_read_the_epoch_exactly_once(clean_store, tmp_path):
    """Two processes (gloo) each batch the store as rank 0 or 1 and gather the indices they read: equal batch
    counts, disjoint, together every pair, for an epoch whose batch count is odd (so a batch is halved)."""
    lengths = clean_store.train_data().lengths()

    def batch_count(max_tokens, epoch=0):
        s = TokenBudgetBatchSampler(lengths, max_tokens, seed=3)
        s.set_epoch(epoch)
        return len(s)

    max_tokens = next(m for m in range(300, 400) if batch_count(m) % 2 == 1)
    (tmp_path / "rank.py").write_text(RANK_SCRIPT)
    init, out = f"file://{tmp_path / 'rendezvous'}", tmp_path / "read.json"
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(open(tmp_path / f"rank{r}.log", "w")) for r in range(2)]
        procs = [subprocess.Popen([sys.executable, str(tmp_path / "rank.py"), str(r), str(clean_store.path),
                                   str(max_tokens), init, str(out)], stdout=logs[r], stderr=subprocess.STDOUT)
                 for r in range(2)]
        try:
            for p in procs:
                p.wait(timeout=SUBPROCESS_TIMEOUT)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert [p.returncode for p in procs] == [0, 0], (tmp_path / "rank0.log").read_text()[-2000:]
    gathered = json.loads(out.read_text())
    n = len(lengths)
    for epoch in (0, 1):
        ranks = [gathered[r][epoch] for r in range(2)]
        seen = Counter(i for batches in ranks for b in batches for i in b)
        assert len(ranks[0]) == len(ranks[1]) == math.ceil(batch_count(max_tokens, epoch) / 2)
        assert seen == Counter(range(n))  # disjoint, and together the whole epoch
        for r in range(2):  # what each process read is what its sampler gives here
            s = TokenBudgetBatchSampler(lengths, max_tokens, seed=3, num_replicas=2, rank=r)
            s.set_epoch(epoch)
            assert ranks[r] == list(s)


# ---------------------------------------------------------------------------------------------- e. input formats
def _write_tsv(path: Path, pairs, opener=open, newline="\n", bom=False) -> Path:
    with opener(path, "wt", encoding="utf-8", newline="") as f:
        f.write(("\ufeff" if bom else "") + "".join(f"{s}\t{t}{newline}" for s, t in pairs))
    return path


def _write_jsonl(path: Path, pairs, opener=open) -> Path:
    with opener(path, "wt", encoding="utf-8") as f:  # non-ASCII as \\u escapes; key order and extra keys vary
        for i, (s, t) in enumerate(pairs):
            f.write(json.dumps({"tgt": t, "id": i, "src": s} if i % 2 else {"src": s, "tgt": t}) + "\n")
    return path


def _write_two(directory: Path, split: str, pairs, ext: str = "", opener=open) -> tuple[Path, Path]:
    out = []
    for side, k in (("en", 0), ("es", 1)):
        path = directory / f"{split}.{side}{ext}"
        with opener(path, "wt", encoding="utf-8") as f:
            f.write("".join(p[k] + "\n" for p in pairs))
        out.append(path)
    return out[0], out[1]


FORMATS = {
    "tsv.gz": lambda d, split, pairs: _write_tsv(d / f"{split}.tsv.gz", pairs, gzip.open),
    "tsv.xz": lambda d, split, pairs: _write_tsv(d / f"{split}.tsv.xz", pairs, lzma.open),
    "tsv.bz2": lambda d, split, pairs: _write_tsv(d / f"{split}.tsv.bz2", pairs, bz2.open),
    "tsv, CRLF and BOM": lambda d, split, pairs: _write_tsv(d / f"{split}.tsv", pairs, newline="\r\n", bom=True),
    "jsonl": lambda d, split, pairs: _write_jsonl(d / f"{split}.jsonl", pairs),
    "ndjson.gz": lambda d, split, pairs: _write_jsonl(d / f"{split}.ndjson.gz", pairs, gzip.open),
    "jsonl.xz": lambda d, split, pairs: _write_jsonl(d / f"{split}.JSONL.xz", pairs, lzma.open),
    "two files": lambda d, split, pairs: _write_two(d, split, pairs),
    "two files .bz2": lambda d, split, pairs: _write_two(d, split, pairs, ".bz2", bz2.open),
}


def _tiny_pairs(tiny_tsv, split):
    return [tuple(line.split("\t")) for line in (tiny_tsv / f"{split}.tsv").read_text("utf-8").splitlines()]


def _split_rows(store, split) -> list[list[str]]:
    return [line.split("\t") for line in (store.path / f"{split}.tsv").read_text("utf-8").splitlines()]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_input_format_gives_the_store_of_the_plain_tsv(tiny_tsv, tmp_path, clean_store, fmt):
    files = {split: FORMATS[fmt](tmp_path, split, _tiny_pairs(tiny_tsv, split)) for split in ("train", "dev", "test")}
    store = prepare_corpus(config(files["train"], files["dev"], files["test"], store=tmp_path / "store"))
    assert store.key != clean_store.key  # other inputs ...
    for k in ("bin_sha256", "idx_sha256", "pairs", "tokens"):  # ... the same content
        assert store.manifest["train"][k] == clean_store.manifest["train"][k], k
    assert store.manifest["counts"] == clean_store.manifest["counts"]
    assert store.manifest["tokenizer_sha256"] == clean_store.manifest["tokenizer_sha256"]
    assert sha256(store.path / "train.bin") == sha256(clean_store.path / "train.bin")
    assert sha256(store.path / "train.idx") == sha256(clean_store.path / "train.idx")
    for split in ("dev", "test"):
        rows, clean_rows = _split_rows(store, split), _split_rows(clean_store, split)
        assert [r[1:] for r in rows] == [r[1:] for r in clean_rows] == [list(p) for p in _tiny_pairs(tiny_tsv, split)]
        # refs name the file (the source side's of two files) and the same line
        name = Path(_paths(files[split])[0]).name
        assert [r[0] for r in rows] == [r[0].replace(f"{split}.tsv", name, 1) for r in clean_rows]


# ---------------------------------------------------------------------------------------------- f. damage
def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def _edit_manifest(d: Path, edit) -> None:
    manifest = json.loads((d / "store.json").read_text())
    edit(manifest)
    (d / "store.json").write_text(json.dumps(manifest))


# name: (damage, what open_store's error names, what `attnlab train` with data.store there does)
DAMAGE = {
    "train.bin truncated": (lambda d: (d / "train.bin").write_bytes((d / "train.bin").read_bytes()[:-2]),
                            r"train\.bin: .* bytes where the manifest says", "error"),
    "train.bin byte flipped": (lambda d: _flip(d / "train.bin", (d / "train.bin").stat().st_size // 2),
                               r"train\.bin: checksum differs", "error"),
    "train.bin grown": (lambda d: (d / "train.bin").write_bytes((d / "train.bin").read_bytes() + b"\0\0"),
                        r"train\.bin: .* bytes", "error"),
    "train.bin missing": (lambda d: (d / "train.bin").unlink(), r"train\.bin: missing", "error"),
    "train.idx truncated": (lambda d: (d / "train.idx").write_bytes((d / "train.idx").read_bytes()[:200]),
                            r"train\.idx: not the index", "error"),
    "train.idx byte flipped": (lambda d: _flip(d / "train.idx", (d / "train.idx").stat().st_size - 1),
                               r"train\.idx: checksum differs", "error"),
    "train.idx header damaged": (lambda d: _flip(d / "train.idx", 3), r"train\.idx: not the index", "error"),
    "train.idx missing": (lambda d: (d / "train.idx").unlink(), r"train\.idx: missing", "error"),
    "tokenizer missing": (lambda d: shutil.rmtree(d / "tokenizer"), r"tokenizer\.json: missing", "error"),
    "test.tsv missing": (lambda d: (d / "test.tsv").unlink(), r"test\.tsv: missing", "error"),
    "manifest pairs count altered": (lambda d: _edit_manifest(d, lambda m: m["train"].update(pairs=7)),
                                     r"train\.idx: not the index of 7 pairs", "error"),
    "manifest of another version": (lambda d: _edit_manifest(d, lambda m: m.update(version=99)),
                                    r"format version 99", "error"),
    "manifest without train": (lambda d: _edit_manifest(d, lambda m: m.pop("train")),
                               r"store\.json: damaged manifest", "error"),
    # no manifest, or its key unreadable: `attnlab train` treats the folder (only store files in it) as an
    # incomplete or outdated store and builds the store anew
    "manifest deleted": (lambda d: (d / "store.json").unlink(), r"not a prepared corpus \(store\.json missing\)",
                         "rebuilt"),
    "manifest truncated": (lambda d: (d / "store.json").write_text((d / "store.json").read_text()[:100]),
                           r"store\.json: damaged manifest", "rebuilt"),
    "manifest not an object": (lambda d: (d / "store.json").write_text("[1, 2]"),
                               r"store\.json: damaged manifest", "rebuilt"),
}


@pytest.fixture
def damaged(clean_store, tmp_path):
    """A copy of the clean store to damage."""
    d = tmp_path / "damaged"
    shutil.copytree(clean_store.path, d)
    return d


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_store_is_a_one_line_error_that_says_how_to_rebuild(tiny_tsv, tmp_path, clean_store, damaged,
                                                                      capsys, damage):
    make, names, cli = DAMAGE[damage]
    open_store(damaged, verify=True)  # the copy is whole
    make(damaged)
    with pytest.raises(AttnlabError, match="rebuild") as e:
        open_store(damaged, verify=True)
    assert re.search(names, str(e.value)) and "\n" not in str(e.value)
    cfg_path = write_config(tmp_path / "c.toml", tiny_tsv, damaged, max_steps=1, eval_every=1)
    capsys.readouterr()
    rc = cli_main(["train", str(cfg_path), "--out", str(tmp_path / "run")])  # ATTNLAB_RAISE_INTERNAL: no masking
    err = capsys.readouterr().err
    if cli == "rebuilt":
        assert rc == 0
        assert_same_as_clean(open_store(damaged), clean_store)
        return
    assert rc == 2 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("attnlab: error: ") and str(damaged) in last
    assert cli == "error" and "rebuild" in last
    assert not (tmp_path / "run").exists()


def test_a_damaged_store_stops_attnlab_train_with_exit_code_2(tiny_tsv, tmp_path, damaged):
    """The same through a real `attnlab train` process."""
    _flip(damaged / "train.bin", 10)
    cfg_path = write_config(tmp_path / "c.toml", tiny_tsv, damaged, max_steps=1)
    done = subprocess.run([sys.executable, "-m", "attnlab.app.cli", "train", str(cfg_path), "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert re.search(r"attnlab: error: .*train\.bin: checksum differs.*rebuild", done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("key", ["counts", "name", "stats", "vocab"])
def test_a_manifest_missing_a_field_is_a_clean_error(tiny_tsv, tmp_path, damaged, capsys, key):
    _edit_manifest(damaged, lambda m: m.pop(key))
    cfg_path = write_config(tmp_path / "c.toml", tiny_tsv)
    with pytest.raises(AttnlabError, match="rebuild"):
        open_store(damaged).stats()
    assert cli_main(["data", "prepare", str(cfg_path), "--out", str(damaged)]) == 2


@pytest.mark.parametrize("key", ["key", "tokenizer_sha256"])
def test_a_resume_beside_a_manifest_missing_its_key_is_no_internal_error(tiny_tsv, damaged, clean_store, key):
    _edit_manifest(damaged, lambda m: m.pop(key))
    try:  # what a resumed run does: prepare with the run's tokenizers
        store = prepare(store_spec(config(*tiny_files(tiny_tsv))), damaged, tokenizers=clean_store.tokenizers())
    except AttnlabError as e:
        assert "rebuild" in str(e)
    else:  # or built again with those tokenizers (a key of its own: given tokenizers are part of it)
        assert_same_as_clean(store, clean_store, same_key=False)


@pytest.mark.parametrize("split", ["dev", "test"])
def test_a_truncated_dev_or_test_split_is_detected(damaged, split):
    path = damaged / f"{split}.tsv"
    lines = path.read_text("utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[: len(lines) // 2]), "utf-8")  # whole lines: every row still parses
    with pytest.raises(AttnlabError, match="rebuild"):
        open_store(damaged, verify=True)


def test_the_rebuild_advice_works_when_the_manifest_is_gone(tiny_tsv, tmp_path, damaged, clean_store, capsys):
    (damaged / "store.json").unlink()
    with pytest.raises(AttnlabError, match=r"data prepare CONFIG --force"):
        open_store(damaged)
    cfg_path = write_config(tmp_path / "c.toml", tiny_tsv)
    assert cli_main(["data", "prepare", str(cfg_path), "--out", str(damaged), "--force"]) == 0, \
        capsys.readouterr().err
    assert_same_as_clean(open_store(damaged), clean_store)


# ---------------------------------------------------------------------------------------------- g. reading, filters
def _prepare_files(tmp_path, train_text: str, name: str = "train.tsv", **data):
    """A store of a train file with the given text, dev/test small clean TSVs."""
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    (d / name).write_text(train_text, "utf-8")
    for split, seed in (("dev", 1), ("test", 2)):
        _write_tsv(d / f"{split}.tsv", make_pairs(5, seed))
    return d / name, lambda **more: prepare_corpus(config(d / name, d / "dev.tsv", d / "test.tsv",
                                                           store=tmp_path / "store", **{**data, **more}))


def test_a_malformed_tsv_line_is_named_and_with_skip_bad_lines_skipped_and_counted(tmp_path):
    good = make_pairs(12, seed=3)
    lines = [f"{s}\t{t}" for s, t in good]
    lines[2:2] = ["a\tb\tc"]  # line 3: three fields
    lines[5:5] = [""]  # line 6: empty
    lines[7:7] = ["only one field"]  # line 8
    lines[9:9] = ["the cat\t   "]  # line 10: an empty side
    path, make = _prepare_files(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(AttnlabError, match=rf"^{re.escape(str(path))}:3: expected 2 tab-separated fields.*"
                                           r"data\.skip_bad_lines"):
        make()
    assert not (tmp_path / "store").exists()
    store = make(skip_bad_lines=True)
    counts = store.manifest["counts"]
    assert (counts["bad_lines_skipped"], counts["empty_skipped"], counts["train"]) == (2, 2, 12)
    assert [(p.src, p.tgt) for p in store.pairs("train")] == good


def test_a_malformed_json_line_is_named_and_with_skip_bad_lines_skipped_and_counted(tmp_path):
    good = make_pairs(10, seed=4)
    lines = [json.dumps({"src": s, "tgt": t}) for s, t in good]
    bad = ['{"src": "the cat"', '{"src": "the cat"}', '{"src": 3, "tgt": "la"}', '["the", "la"]', "the\tla"]
    for k, line in enumerate(bad):
        lines.insert(2 * k + 1, line)  # lines 2, 4, 6, 8, 10
    path, make = _prepare_files(tmp_path, "\n".join(lines) + "\n", name="train.jsonl")
    with pytest.raises(AttnlabError, match=rf"^{re.escape(str(path))}:2: not a JSON object"):
        make()
    store = make(skip_bad_lines=True)
    assert store.manifest["counts"]["bad_lines_skipped"] == len(bad)
    assert [(p.src, p.tgt) for p in store.pairs("train")] == good


def test_a_malformed_dev_line_names_the_dev_file(tmp_path):
    path, make = _prepare_files(tmp_path, "".join(f"{s}\t{t}\n" for s, t in make_pairs(10)))
    dev = path.parent / "dev.tsv"
    dev.write_text(dev.read_text() + "no tab here\n")
    with pytest.raises(AttnlabError, match=rf"^{re.escape(str(dev))}:6: "):
        make()


def test_aligned_files_of_different_lengths_are_an_error_naming_the_longer_file(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    pairs = make_pairs(8)
    (d / "train.en").write_text("".join(s + "\n" for s, _ in pairs))
    (d / "train.es").write_text("".join(t + "\n" for _, t in pairs[:6]))
    for skip in (False, True):  # not a malformed line: skipping cannot realign the files
        with pytest.raises(AttnlabError, match=rf"{re.escape(str(d / 'train.en'))}:7: line has no partner"):
            prepare_corpus(config((d / "train.en", d / "train.es"), store=tmp_path / "store", dev_size=1,
                                  test_size=1, skip_bad_lines=skip))


def test_filters_and_dedup_are_counted_and_keep_the_right_pairs(tmp_path):
    rng = random.Random(1)
    rows = make_pairs(200, seed=5)  # 2 to 7 words a side, equal word counts
    rows += rows[:30]  # repeats
    rows += [(" ".join(["the"] * k), " ".join(["la"] * k)) for k in (9, 10, 12)]  # longer than max_words = 8
    rows += [("the big red house", "casa"), ("a cat", "una gata vieja y roja mi puerta"),  # ratios 4 and 3.5
             ("the old green door opens", "la puerta")]  # 2.5
    rng.shuffle(rows)
    max_words, max_ratio = 8, 2.0
    expected, too_long, bad_ratio = [], 0, 0
    for s, t in rows:  # independently: max_words first, then the ratio of words, then exact repeats
        ws, wt = len(s.split()), len(t.split())
        if max(ws, wt) > max_words:
            too_long += 1
        elif max(ws, wt) > max_ratio * min(ws, wt):
            bad_ratio += 1
        else:
            expected.append((s, t))
    unique = list(dict.fromkeys(expected))
    assert (too_long, bad_ratio) == (3, 3) and len(expected) - len(unique) >= 30
    long_dev = (" ".join(["the"] * 12), " ".join(["la"] * 12))
    path, make = _prepare_files(tmp_path, "".join(f"{s}\t{t}\n" for s, t in rows), max_words=max_words,
                                max_ratio=max_ratio, dedup=True)
    dev = path.parent / "dev.tsv"
    dev.write_text(dev.read_text() + f"{long_dev[0]}\t{long_dev[1]}\n")  # dev and test are never filtered
    store = make()
    counts = store.manifest["counts"]
    assert (counts["train_read"], counts["too_long"], counts["bad_ratio"], counts["duplicates"], counts["train"]) == \
        (len(rows), too_long, bad_ratio, len(expected) - len(unique), len(unique))
    assert [(p.src, p.tgt) for p in store.pairs("train")] == unique  # first occurrences, in corpus order
    assert (store.pairs("dev")[-1].src, store.pairs("dev")[-1].tgt) == long_dev
    # a seeded subset on top: counted, a subsequence of the filtered pairs, the same every time
    sub = make(max_train_pairs=50)
    assert sub.manifest["counts"]["subsampled_out"] == len(unique) - 50
    kept = [(p.src, p.tgt) for p in sub.pairs("train")]
    assert len(kept) == 50 and _is_subsequence(kept, unique)
    assert [(p.src, p.tgt) for p in make(max_train_pairs=50, subset_seed=1).pairs("train")] != kept
    assert [(p.src, p.tgt) for p in make(max_train_pairs=50).pairs("train")] == kept


def _is_subsequence(part, whole) -> bool:
    it = iter(whole)
    return all(x in it for x in part)


def _count_builds(monkeypatch) -> list:
    builds = []
    original = prepare_mod._build

    def counted(*args, **kwargs):
        builds.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(prepare_mod, "_build", counted)
    return builds


@pytest.mark.parametrize("where", ["data.store", "cache"])
def test_the_same_inputs_reuse_the_store_and_a_changed_file_rebuilds_it(tmp_path, monkeypatch, private_cache, where):
    d = tmp_path / "in"
    d.mkdir()
    train_path = _write_tsv(d / "train.tsv", make_pairs(300, seed=7))
    for split, seed in (("dev", 1), ("test", 2)):
        _write_tsv(d / f"{split}.tsv", make_pairs(5, seed))
    cfg = config(train_path, d / "dev.tsv", d / "test.tsv", store=tmp_path / "store" if where == "data.store" else "")
    builds = _count_builds(monkeypatch)
    first = prepare_corpus(cfg)
    assert builds == [1] and first.manifest["train"]["pairs"] == 300
    if where == "cache":
        assert first.path.parent == private_cache / "stores" and first.path.name.startswith("train-")
    stat = (first.path / "store.json").stat()
    again = prepare_corpus(cfg)  # the same config: reused, not rebuilt
    assert builds == [1] and again.path == first.path and again.key == first.key
    assert again.manifest["prepare_seconds"] == first.manifest["prepare_seconds"]
    assert (again.path / "store.json").stat().st_mtime_ns == stat.st_mtime_ns
    # the same content with a new modification time: another key, built again (to the same content)
    st = train_path.stat()
    os.utime(train_path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    touched = prepare_corpus(cfg)
    assert builds == [1, 1] and touched.key != first.key
    assert touched.manifest["train"]["bin_sha256"] == first.manifest["train"]["bin_sha256"]
    # new content: another key, and the store holds it
    with open(train_path, "a", encoding="utf-8") as f:
        f.write("the green window\tla ventana verde\n")
    changed = prepare_corpus(cfg)
    assert builds == [1, 1, 1] and changed.key not in (first.key, touched.key)
    assert changed.manifest["train"]["pairs"] == 301
    assert (changed.pairs("train")[-1].src, changed.pairs("train")[-1].tgt) == ("the green window", "la ventana verde")
    if where == "data.store":  # one folder, replaced
        assert changed.path == first.path and debris(changed.path) == []
    else:  # the cache keys folders by the inputs
        assert len({first.path, touched.path, changed.path}) == 3
    assert prepare_corpus(cfg).key == changed.key and builds == [1, 1, 1]
    # a setting that changes the content changes the key too
    assert prepare_corpus(config(train_path, d / "dev.tsv", d / "test.tsv", store=cfg.data.store,
                                 max_words=4)).key != changed.key


# ---------------------------------------------------------------------------------------------- h. concurrent
CONCURRENT_SCRIPT = """
import logging, os, sys, time
from pathlib import Path
import attnlab.data.prepare as prep
from attnlab.families.translation import load_experiment, prepare_corpus
logging.basicConfig(level=logging.INFO, format="%(message)s")
build = prep._build
def slow(*args, **kwargs):
    print("BUILT", flush=True)
    time.sleep(1.0)  # long enough that the other process arrives while this one holds the lock
    return build(*args, **kwargs)
prep._build = slow
cfg = load_experiment(sys.argv[1])
Path(sys.argv[2] + "." + sys.argv[3]).touch()  # ready
while not Path(sys.argv[2]).exists():
    time.sleep(0.002)
s = prepare_corpus(cfg)
print("STORE", s.key, s.path, flush=True)
"""


def test_two_processes_preparing_the_same_corpus_at_once_make_one_store(tiny_tsv, tmp_path, clean_store):
    place = tmp_path / "store"
    cfg_path = write_config(tmp_path / "c.toml", tiny_tsv, place)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT_SCRIPT, str(cfg_path), str(go), str(k)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(2)]
    try:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT
        while not all((tmp_path / f"go.{k}").exists() for k in range(2)):
            assert all(p.poll() is None for p in procs) and time.monotonic() < deadline, "a process did not start"
            time.sleep(0.005)
        go.touch()  # both start preparing together
        outputs = [p.communicate(timeout=SUBPROCESS_TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    outs = "".join(out for out, _ in outputs)
    assert outs.count("BUILT") == 1  # one built it, the other waited and reused it
    assert "another process is preparing" in "".join(err for _, err in outputs)
    assert {line for line in outs.splitlines() if line.startswith("STORE")} == {f"STORE {clean_store.key} {place}"}
    assert_same_as_clean(open_store(place), clean_store)
    assert debris(place) == []


# ---------------------------------------------------------------------------------------------- i. hostile inputs
@pytest.mark.parametrize("name, line, message", [
    ("train.tsv", b"the house " * 10_000 + b"\tla casa", r"longer than data\.max_line_bytes = 65,536 bytes"),
    ("train.tsv", "se\u00f1or\tsir".encode("latin-1"), r"not valid UTF-8 \(byte 0xf1\)"),
    ("train.jsonl", b'{"src": "a \\ud800", "tgt": "la"}', r"a lone surrogate escape"),
    ("train.jsonl", b"[" * 30_000 + b"]" * 30_000, r"JSON nested too deeply"),
])
def test_a_hostile_line_is_named_and_with_skip_bad_lines_skipped_and_counted(tmp_path, name, line, message):
    good = make_pairs(12, seed=3)
    rows = [(json.dumps({"src": s, "tgt": t}) if name.endswith(".jsonl") else f"{s}\t{t}").encode() for s, t in good]
    rows.insert(3, line)  # line 4
    path, make = _prepare_files(tmp_path, "", name=name)
    path.write_bytes(b"\n".join(rows) + b"\n")
    with pytest.raises(AttnlabError, match=rf"^{re.escape(str(path))}:4: {message}.*data\.skip_bad_lines") as e:
        make()
    assert "\n" not in str(e.value) and not (tmp_path / "store").exists()
    store = make(skip_bad_lines=True)
    assert store.manifest["counts"]["bad_lines_skipped"] == 1
    assert [(p.src, p.tgt) for p in store.pairs("train")] == good


def test_max_line_bytes_is_a_setting_and_keys_the_store(tmp_path):
    rows = "".join(f"{s}\t{t}\n" for s, t in make_pairs(12))  # lines of at most ~100 bytes
    path, make = _prepare_files(tmp_path, rows + "the cat " * 30 + "\tla gata\n")  # 250 bytes
    default = make(skip_bad_lines=True)
    assert default.manifest["counts"]["bad_lines_skipped"] == 0 and "max_line_bytes" not in default.manifest["spec"]
    short = make(skip_bad_lines=True, max_line_bytes=200)
    assert short.manifest["counts"]["bad_lines_skipped"] == 1 and short.key != default.key
    assert short.manifest["spec"]["max_line_bytes"] == 200
    assert make(skip_bad_lines=True, max_expansion=0).key == default.key  # whether a file is read, not what


@pytest.mark.parametrize("kind", ["folder", "fifo", "/dev/zero", "/dev/null"])
def test_an_input_that_is_not_a_regular_file_stops_data_prepare_in_one_line(tmp_path, capsys, kind):
    if kind == "folder":
        path = tmp_path / "corpus.tsv"
        path.mkdir()
    elif kind == "fifo":
        path = tmp_path / "corpus.tsv"
        os.mkfifo(path)
    else:
        path = Path(kind)
    d = tmp_path / "in"
    d.mkdir()
    for split, seed in (("dev", 1), ("test", 2)):
        _write_tsv(d / f"{split}.tsv", make_pairs(5, seed))
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(f'[data]\ncorpus = "files"\ntrain = ["{path}"]\ndev = ["{d / "dev.tsv"}"]\n'
                        f'test = ["{d / "test.tsv"}"]\n[tokenizer]\nkind = "char"\n', encoding="utf-8")
    assert cli_main(["data", "prepare", str(cfg_path), "--out", str(tmp_path / "store")]) == 2
    said = {"folder": "is a directory, not a corpus file", "fifo": "is not a regular file (a FIFO); give a corpus file"
            }.get(kind, "is not a regular file (a character device); give a corpus file")
    assert capsys.readouterr().err.strip().splitlines() == [f"attnlab: error: {path}: {said}"]


def _rehash(d: Path) -> None:
    """What a tamperer who knows the format does after an edit: the manifest's sums made to match the files."""
    def edit(m):
        m["train"].update(bin_sha256=sha256(d / "train.bin"), idx_sha256=sha256(d / "train.idx"),
                          tokens=(d / "train.bin").stat().st_size // np.dtype(m["train"]["dtype"]).itemsize)
        for name, entry in m["files"].items():
            entry.update(size=(d / name).stat().st_size, sha256=sha256(d / name))
    _edit_manifest(d, edit)


def _edit_index(edit):
    def damage(d: Path) -> None:
        sizes = np.load(d / "train.idx")
        edited = edit(sizes)  # in place, or a new array
        sizes = sizes if edited is None else edited
        with open(d / "train.idx", "wb") as f:
            np.save(f, sizes)
    return damage


def _set_index(pair: int, side: int, value: int):
    def edit(sizes):
        sizes[pair, side] = value
    return _edit_index(edit)


def _set_id(position: int, vocab_side: str, plus: int):
    def damage(d: Path) -> None:
        m = json.loads((d / "store.json").read_text())
        ids = np.fromfile(d / "train.bin", dtype=m["train"]["dtype"])
        ids[position] = m["vocab"][vocab_side] + plus
        ids.tofile(d / "train.bin")
    return damage


def _grow_source_vocab(d: Path) -> None:
    """A pair's first source id raised past the source vocabulary, the manifest's source vocabulary raised to
    cover it: the tokenizer files still say otherwise."""
    _set_id(0, "src", 5)(d)
    _edit_manifest(d, lambda m: m["vocab"].update(src=m["vocab"]["src"] + 6))


# name: (damage, then the manifest re-hashed; what the one-line error names)
REHASHED = {
    "an index entry past the end of the data": (_set_index(5, 0, 60_000), r"train\.idx: its lengths add up to"),
    "all index lengths 0": (_edit_index(lambda s: s * 0), r"train\.idx: its lengths add up to 0 tokens"),
    "the index as int64": (_edit_index(lambda s: s.astype(np.int64)), r"train\.idx: not the index"),
    "a source id above the vocabulary": (_set_id(0, "src", 3), r"train\.bin: pair 0 holds the source token id"),
    "a target id at the vocabulary": (_set_id(-1, "tgt", 0), r"train\.bin: pair 1,\d+ holds the target token id"),
    "the manifest's vocabulary grown": (_grow_source_vocab, r"tokenizer: vocabularies of"),
    "the manifest's dtype float32": (lambda d: _edit_manifest(d, lambda m: m["train"].update(dtype="<f4")),
                                     r"store\.json: damaged manifest \(train\.dtype"),
}


@pytest.mark.parametrize("damage", list(REHASHED))
def test_a_tampered_store_with_a_rehashed_manifest_cannot_train(tiny_tsv, tmp_path, damaged, capsys, damage):
    make, names = REHASHED[damage]
    make(damaged)
    _rehash(damaged)
    cfg_path = write_config(tmp_path / "c.toml", tiny_tsv, damaged, max_steps=1, eval_every=1)
    capsys.readouterr()
    assert cli_main(["train", str(cfg_path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("attnlab: error: ") and re.search(names, last), last
    assert str(damaged) in last and "rebuild" in last
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------------------------- j. symlinks
def _decoys(root: Path) -> dict:
    """A decoy file and a decoy folder (with a file) outside the store: what a symlink in the store points at."""
    root.mkdir()
    (root / "file").write_text("decoy\n")
    (root / "folder").mkdir()
    (root / "folder" / "inside").write_text("decoy\n")
    return _snapshot(root)


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


STORE_LINKS = ["store.json", "train.bin", "train.idx", "dev.tsv", "test.tsv", "tokenizer", "tokenizer/tokenizer.json",
               "tokenizer/src.chars.json", "the store folder", "the store folder (holding store names only)",
               "a stale staging folder", "the lock file"]


@pytest.mark.parametrize("position", STORE_LINKS)
def test_a_symlink_anywhere_in_a_store_folder_never_gets_written_through(tmp_path, position):
    path, make = _prepare_files(tmp_path, "".join(f"{s}\t{t}\n" for s, t in make_pairs(40, seed=9)))
    place = tmp_path / "store"

    def again():
        return prepare_corpus(config(path, path.parent / "dev.tsv", path.parent / "test.tsv", store=place), force=True)

    decoys = tmp_path / "decoys"
    before = _decoys(decoys)
    if position.startswith("the store folder"):
        target = decoys / "folder"
        if "names" in position:  # it then passes for an outdated store: moved aside, never written into
            (target / "inside").rename(target / "train.bin")
            before = _snapshot(decoys)
        place.symlink_to(target, target_is_directory=True)
    elif position == "a stale staging folder":  # as a killed prepare would leave it, but a link
        (tmp_path / f".store.tmp-{os.getpid()}").symlink_to(decoys / "folder", target_is_directory=True)
    elif position == "the lock file":
        (tmp_path / ".store.lock").symlink_to(decoys / "file")
    else:
        make()
        entry = place / position
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        entry.symlink_to(decoys / ("folder" if position == "tokenizer" else "file"))
    if position == "the lock file":
        with pytest.raises(AttnlabError, match=r"\.store\.lock: cannot open the store's lock file .*symlink") as e:
            again()
        assert "\n" not in str(e.value)
    elif position == "the store folder":  # a folder of other files: refused, as before
        with pytest.raises(AttnlabError, match="exists and is not a prepared corpus"):
            again()
    else:
        store = again()
        assert store.path == place and not place.is_symlink()
        assert not [p for p in place.rglob("*") if p.is_symlink()]
        open_store(place, verify=True)
    assert _snapshot(decoys) == before
    assert debris(place) == []
