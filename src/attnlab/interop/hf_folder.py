"""A Hugging Face model folder, read and written with safetensors and JSON only (never `transformers`, never an
unpickle): what every architecture module of `attnlab.interop` shares. Reading: the local folder of SRC (or a hub
name, fetched with huggingface_hub), its config.json and architecture, its weights (model.safetensors; a folder
with only pickled weights, pytorch_model.bin, is refused, never loaded). Writing: an export folder and an imported
run directory, each made in a private folder and moved into place (`attnlab.core.fileio.replace_folder`), so a
kill leaves the old one or none.

An imported model's vocabulary is put in attnlab's order (PAD 0, BOS 1, EOS 2, UNK 3, then the rest in the
model's order: `special_rows`). A special the model has not (GPT-2 has no PAD and no UNK), or has twice (GPT-2's
<|endoftext|> is its BOS and its EOS), is a dead output row: the output bias DEAD_LOGIT on a copy of a real row's
weights, so its logit is at most the largest minus 300 and its probability exactly 0 in fp32 (`dead_rows`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer
from torch import Tensor, nn

from attnlab.core.checkpoint import FLOAT_DTYPES, read_tensors, write_weights_run
from attnlab.core.config import MAX_DIM
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write, atomic_write_bytes, new_folder, read_json, replace_folder, write_json
from attnlab.data.tokenizers import SPECIALS, TokenizerPair, save_tokenizers

DEAD_LOGIT = -300.0  # output bias of a dead row: exp(-300 - max) is 0 in fp32 (< 1e-45)
MANIFEST = "attnlab.json"  # what an export was made from (the run's checkpoint and tokenizer)


@dataclass
class Imported:
    """What an architecture module reads from a folder: the model's settings (its family's model section), the
    tokenizer's settings and the tokenizer, attnlab's state dict, and what imported.json records."""

    settings: dict
    tokenizer_settings: dict
    tokenizer: Any
    state: dict[str, Tensor]
    info: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- reading
def source_folder(src: Path | str) -> Path:
    """The local folder of SRC: a `save_pretrained` folder as it is, or a hub name ("Helsinki-NLP/opus-mt-en-es")
    fetched with huggingface_hub's snapshot_download (needs internet; never in the tests)."""
    path = Path(src)
    if path.is_dir():
        return path
    name = str(src)
    if os.path.lexists(path) or name.count("/") != 1 or name.startswith((".", "/", "~")):
        raise AttnlabError(f"{src}: no such folder (give a save_pretrained folder, or a hub name such as "
                           "Helsinki-NLP/opus-mt-en-es)")
    try:
        from huggingface_hub import snapshot_download  # optional: only a hub name needs it
    except ImportError:
        raise AttnlabError(f"{src}: not a local folder, and fetching it from the hub needs huggingface_hub (pip "
                           "install huggingface_hub)") from None
    try:
        return Path(snapshot_download(name, allow_patterns=["*.json", "*.spm", "*.txt", "model.safetensors",
                                                            "README.md"]))
    except Exception as e:  # offline, a name that does not exist, a gated model: one line, no traceback
        raise AttnlabError(f"{src}: cannot fetch it from the hub ({type(e).__name__}: {str(e).splitlines()[0]})"
                           ) from None


def read_config(folder: Path) -> dict:
    """config.json of a folder, a JSON object."""
    hf = read_json(folder / "config.json")
    if not isinstance(hf, dict):
        raise AttnlabError(f"{folder / 'config.json'}: expected a JSON object")
    return hf


def architecture(hf: dict) -> str:
    """The model class config.json names (its one `architectures` entry, else its model_type)."""
    arch = hf.get("architectures") or [hf.get("model_type", "unknown")]
    return ", ".join(map(str, arch)) if isinstance(arch, list) else str(arch)


def read_weights(folder: Path) -> dict[str, Tensor]:
    """model.safetensors of a folder; pickled weights only (pytorch_model.bin) are refused, never loaded."""
    weights = folder / "model.safetensors"
    if not weights.is_file() and (folder / "pytorch_model.bin").is_file():
        raise AttnlabError(f"{folder}: only pickled weights (pytorch_model.bin), which attnlab never loads; save the "
                           "model with save_pretrained(DIR, safe_serialization=True)")
    return read_tensors(weights)[0]


def parse_tokenizer(text: str, where: Path) -> tuple[Tokenizer, dict]:
    """(the `tokenizers` library's tokenizer, its JSON) of tokenizer.json text; a malformed one names the folder."""
    try:
        spec = json.loads(text)
        return Tokenizer.from_str(text), spec if isinstance(spec, dict) else {}
    except Exception as e:  # JSON errors, and the library's own Exception type for a malformed tokenizer
        raise AttnlabError(f"{where}: not a readable tokenizer.json ({str(e).strip()[:120]})") from None


def setting(hf: dict, key: str, where: Path, hi: int = MAX_DIM, lo: int = 1) -> int:
    """config.json's integer `key`, which must be there, from lo to hi (a bool, "16" or 16.0 is not an integer):
    checked before anything of that size is allocated."""
    value = hf.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise AttnlabError(f"{where / 'config.json'}: {key} is {json.dumps(value)[:60]}; expected an integer")
    if not lo <= value <= hi:
        raise AttnlabError(f"{where / 'config.json'}: {key} is {value}; expected {lo} to {hi:,}")
    return value


def choice(hf: dict, key: str, default: str, choices: Mapping[str, Any], where: Path) -> str:
    """config.json's `key` (default when absent), one of `choices` (a list or an object is named, not hashed)."""
    value = hf.get(key, default)
    if not isinstance(value, str) or value not in choices:
        raise AttnlabError(f"{where / 'config.json'}: {key} is {json.dumps(value)[:60]}; attnlab has "
                           f"{', '.join(choices)}")
    return value


def layer_count(sd: dict[str, Tensor], prefix: str) -> int:
    """How many layers the tensors hold under `prefix` (names prefix + "N." ...): 1 + the largest N, 0 if none."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = [int(m.group(1)) for name in sd for m in [pattern.match(name)] if m]
    return 1 + max(found) if found else 0


def check_layers(sd: dict[str, Tensor], prefix: str, layers: int, key: str, where: Path) -> None:
    """The weights hold exactly config.json's number of layers under `prefix` (a layer more is never dropped)."""
    held = layer_count(sd, prefix)
    if held != layers:
        raise AttnlabError(f"{where}: config.json says {key} {layers}, model.safetensors holds {held} layers "
                           f"({prefix}N); the weights disagree with config.json")


def tensor(sd: dict[str, Tensor], name: str, where: Path, shape: tuple | None = None) -> Tensor:
    """sd[name] as float32, of `shape` when given (not empty); a missing or mis-shaped tensor names it."""
    if name not in sd:
        raise AttnlabError(f"{where}: model.safetensors has no tensor {name}; the weights disagree with config.json")
    t = sd[name]
    if t.dtype not in FLOAT_DTYPES:  # int32, bool or complex weights (or float bytes relabelled) are no model's
        raise AttnlabError(f"{where}: tensor {name} is {t.dtype}; weights must be one of "
                           f"{', '.join(str(d) for d in FLOAT_DTYPES)}")
    if shape and tuple(t.shape) != tuple(shape):
        raise AttnlabError(f"{where}: tensor {name} is {tuple(t.shape)}, config.json says {tuple(shape)}; the weights "
                           "disagree with config.json")
    return t.float()


class TensorReader:
    """A folder's tensors read by name (`tensor`: float32, shape checked), each read recorded, so that a mapping
    can refuse what it never read (`refuse_unread`): a weight the target model has not."""

    def __init__(self, sd: dict[str, Tensor], where: Path) -> None:
        self.sd, self.where, self.used = sd, where, set()

    def get(self, name: str, *shape: int) -> Tensor:
        self.used.add(name)
        return tensor(self.sd, name, self.where, shape)

    def skip(self, name: str) -> None:
        """A tensor a folder may hold that the mapping does not need (a tied output layer stored again)."""
        self.used.add(name)

    def refuse_unread(self, model: str) -> None:
        extra = sorted(set(self.sd) - self.used)
        if extra:
            raise AttnlabError(f"{self.where}: unexpected tensor {extra[0]} ({len(extra)} in all); a {model} has no "
                               "such weight")


# ---------------------------------------------------------------------------------------------- vocabulary
def special_rows(vocab: int, pad: int | None, bos: int | None, eos: int | None, unk: int | None,
                 where: Path) -> list[int]:
    """rows[i]: the Hugging Face id of attnlab id i: PAD, BOS, EOS, UNK (-1: the model has not that special),
    then every other id in order."""
    head = [-1 if i is None else i for i in (pad, bos, eos, unk)]
    for name, i in zip(SPECIALS, head):
        if not (isinstance(i, int) and not isinstance(i, bool) and -1 <= i < vocab):
            raise AttnlabError(f"{where}: the special id of {name} is {i!r}, not an id of the {vocab} rows")
    taken = set(head)
    return head + [h for h in range(vocab) if h not in taken]


def dead_rows(rows: list[int]) -> list[int]:
    """The attnlab ids whose output is dead: a special the model has not (-1), or one whose Hugging Face id a
    later special has too (GPT-2's BOS, which is also its EOS: EOS keeps the id's output)."""
    return [i for i, h in enumerate(rows) if h < 0 or (i < len(SPECIALS) and h in rows[i + 1:len(SPECIALS)])]


def gather_rows(matrix: Tensor, rows: list[int]) -> Tensor:
    """matrix (V_hf, ...) in attnlab's row order (len(rows), ...): a row the model has not copies the first real
    special's row (its output is then dead through the bias, `dead_rows`), else row 0."""
    fill = next((h for h in rows[:len(SPECIALS)] if h >= 0), 0)
    return matrix[torch.tensor([h if h >= 0 else fill for h in rows])].clone()


def dead_bias(rows: list[int], bias: Tensor | None = None) -> Tensor | None:
    """The output bias (len(rows),) in attnlab's order with DEAD_LOGIT on the dead rows; None when the model has
    no bias and no row is dead."""
    dead = dead_rows(rows)
    if bias is None and not dead:
        return None
    out = torch.zeros(len(rows)) if bias is None else gather_rows(bias, rows)
    out[dead] = DEAD_LOGIT
    return out


def export_order(rows: list[int]) -> Tensor:
    """order[h]: the attnlab row of Hugging Face id h (an import's rows read back, dead rows left out)."""
    dead = set(dead_rows(rows))
    live = {h: i for i, h in enumerate(rows) if i not in dead}
    return torch.tensor([live[h] for h in range(max(live) + 1)])


# ---------------------------------------------------------------------------------------------- writing
def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode()


def write_export(out: Path, tensors: dict[str, Tensor], files: dict[str, bytes], source: dict | None) -> Path:
    """The export folder `out`: model.safetensors, `files`, and MANIFEST recording `source`; written into a new
    private folder which then replaces `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_folder(out.parent, out.name)
    try:
        tensors = {k: v.detach().float().cpu().contiguous().clone() for k, v in tensors.items()}
        atomic_write(tmp / "model.safetensors", lambda t: save_file(tensors, t, metadata={"format": "pt"}), tmp)
        for name, data in files.items():
            atomic_write_bytes(tmp / name, data, tmp)
        write_json(tmp / MANIFEST, {"made_by": "attnlab export --to huggingface", **(source or {})}, tmp)
        replace_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def load_state(model: nn.Module, state: dict[str, Tensor], folder: Path) -> None:
    """Every parameter of `model` from `state`, shapes checked: a disagreement is one line naming the folder."""
    for name, t in state.items():  # before anything is written: a refused import leaves no run folder
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise AttnlabError(f"{folder}: tensor {name} holds NaN or infinite values; nothing was imported")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:  # shapes or names: config.json and the tensors disagree
        raise AttnlabError(f"{folder}: the weights disagree with config.json ({str(e).splitlines()[-1].strip()})"
                           ) from None


def write_run(out: Path, raw: dict, pair: TokenizerPair, model: nn.Module, imported: dict) -> Path:
    """The run directory `out` of an imported model: config.json, tokenizer/, its weights as step 0 (both best
    and last, `attnlab.core.checkpoint`) and imported.json (`imported`); an existing `out` is refused."""
    if os.path.lexists(out):
        raise AttnlabError(f"{out}: already exists; import into a new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_folder(out.parent, out.name)
    try:
        write_json(tmp / "config.json", raw, tmp)
        save_tokenizers(pair, tmp / "tokenizer")
        write_weights_run(tmp, model)
        write_json(tmp / "imported.json", imported, tmp)
        replace_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
