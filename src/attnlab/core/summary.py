"""A per-layer table of output shapes and parameter counts, like Keras' `model.summary()`.

Shapes come from one real forward pass on a dummy batch (forward hooks on every module that owns
parameters directly), so they are what the model computes, not what a config claims.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence


@dataclass
class LayerRow:
    name: str  # dotted module path
    kind: str  # module class
    output_shape: str  # e.g. (2, 7, 256); "-" if the module never ran in the dummy pass
    params: int  # parameters owned directly by this module (not its children)


def _shape(x) -> str:
    if isinstance(x, PackedSequence):
        return f"packed{tuple(x.data.shape)}"
    if torch.is_tensor(x):
        return str(tuple(x.shape))
    if isinstance(x, (tuple, list)):
        return "[" + ", ".join(_shape(v) for v in x if v is not None) + "]"
    return type(x).__name__


def dummy_batch(src_vocab: int, tgt_vocab: int, src_len: int = 7, tgt_len: int = 6
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A seq2seq batch of two random sentences, the second shorter by 2 (padded), for `layer_table`.

    Shape: -> src (2, S), src lengths (2,), tgt_in (2, T).
    """
    src = torch.randint(4, src_vocab, (2, src_len))
    lengths = torch.tensor([src_len, max(1, src_len - 2)])
    src[1, lengths[1]:] = 0
    return src, lengths, torch.randint(4, tgt_vocab, (2, tgt_len))


def layer_table(model: nn.Module, *inputs) -> list[LayerRow]:
    """Runs model(*inputs) once (eval, no grad) and returns a row per module owning parameters, in call order.

    A module whose forward is never called (a from-scratch RNN cell stepped through its own methods) takes the
    output shape and place of its nearest ancestor that ran (its RNN layer); modules under no such ancestor are
    appended at the end with shape "-"."""
    rows: dict[str, LayerRow] = {}
    shapes: dict[str, str] = {}  # every module that ran: its output shape
    order: list[str] = []  # every module that ran, by the end of its first call
    hooks = []
    seen: set[int] = set()  # tied weights (shared embeddings) count once, at their first owner
    for name, module in model.named_modules():
        params = list(module.parameters(recurse=False))
        if params:
            own = sum(p.numel() for p in params if id(p) not in seen)
            seen.update(id(p) for p in params)
            kind = type(module).__name__ + (" (tied)" if own == 0 else "")
            rows[name] = LayerRow(name, kind, "-", own)

        def hook(mod, args, output, name=name):
            if name not in shapes:
                order.append(name)
            shapes[name] = _shape(output)

        hooks.append(module.register_forward_hook(hook))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    rank = {n: i for i, n in enumerate(order)}

    def ran_as(name: str) -> str | None:
        """The module itself if it ran, else its nearest ancestor that ran (the root excluded)."""
        while name:
            if name in shapes:
                return name
            name = name.rpartition(".")[0]
        return None

    placed = []
    for name, row in rows.items():
        where = ran_as(name)
        if where is not None:
            row.output_shape = shapes[where]
        placed.append((rank[where] if where is not None else len(rank), row))
    return [row for _, row in sorted(placed, key=lambda x: x[0])]


def format_table(rows: list[LayerRow], title: str = "") -> str:
    """Keras-style text table with the total."""
    w_name = max([len("Layer (type)")] + [len(f"{r.name} ({r.kind})") for r in rows])
    w_shape = max([len("Output Shape")] + [len(r.output_shape) for r in rows])
    line = "=" * (w_name + w_shape + 16)
    out = [title] if title else []
    out += [f"{'Layer (type)':<{w_name}}  {'Output Shape':<{w_shape}}  {'Param #':>10}", line]
    out += [f"{r.name + ' (' + r.kind + ')':<{w_name}}  {r.output_shape:<{w_shape}}  {r.params:>10,}" for r in rows]
    total = sum(r.params for r in rows)
    out += [line, f"Total params: {total:,}"]
    return "\n".join(out)
