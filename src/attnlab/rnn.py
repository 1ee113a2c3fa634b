"""Recurrent cells written out from their equations, and a layer that runs them or torch's fused RNNs.

Cells keep torch's parameter names and layouts (weight_ih (G*H, I), weight_hh (G*H, H), bias_ih, bias_hh;
gates in torch's order), so weights copy between `impl="scratch"` and `impl="fused"`.

Shape legend: B batch, L sequence length, I input size, H hidden size, G gates (1 Elman, 4 LSTM, 3 GRU).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab.errors import AttnlabError

CELLS = ("elman", "lstm", "gru")
IMPLS = ("fused", "scratch")
GATES = {"elman": 1, "lstm": 4, "gru": 3}
State = Tensor | tuple[Tensor, Tensor]


class _Cell(nn.Module):
    gates = 1

    def __init__(self, input_size: int, hidden_size: int, keras_bias: bool = False) -> None:
        super().__init__()
        G, H = self.gates, hidden_size
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = nn.Parameter(torch.empty(G * H, input_size))
        self.weight_hh = nn.Parameter(torch.empty(G * H, H))
        self.bias_ih = nn.Parameter(torch.empty(G * H))
        # Keras keeps one bias per gate; torch (and cuDNN) keep two, b_ih and b_hh, that always add up.
        self.bias_hh = None if keras_bias else nn.Parameter(torch.empty(G * H))
        bound = 1.0 / math.sqrt(H)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def project_input(self, x: Tensor) -> Tensor:
        """W_ih x + b_ih for any leading dims: (..., I) -> (..., G*H). Over a whole sequence this is one
        matmul instead of one per step."""
        return x @ self.weight_ih.T + self.bias_ih

    def _hidden(self, h: Tensor) -> Tensor:
        gh = h @ self.weight_hh.T  # (B, G*H)
        return gh if self.bias_hh is None else gh + self.bias_hh

    def forward(self, x: Tensor, state: State) -> State:
        """One step from the input x (B, I)."""
        return self.step_projected(self.project_input(x), state)


class ElmanCell(_Cell):
    """Elman (1990): h' = tanh(W_ih x + b_ih + W_hh h + b_hh). x (B, I), h (B, H) -> h' (B, H)."""

    gates = 1

    def step_projected(self, gi: Tensor, h: Tensor) -> Tensor:
        """gi = project_input(x) (B, H), h (B, H) -> h' (B, H)."""
        return torch.tanh(gi + self._hidden(h))


class LSTMCell(_Cell):
    """LSTM (Hochreiter & Schmidhuber 1997, forget gate of Gers et al. 2000), gates i, f, g, o:
    c' = f * c + i * g,  h' = o * tanh(c'). x (B, I), (h, c) (B, H) each -> (h', c')."""

    gates = 4

    def step_projected(self, gi: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """gi = project_input(x) (B, 4H), (h, c) -> (h', c')."""
        h, c = state
        i, f, g, o = (gi + self._hidden(h)).chunk(4, dim=-1)  # (B, H) each
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class GRUCell(_Cell):
    """GRU (Cho et al. 2014) in torch's form, gates r, z, n:
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),  h' = (1 - z) * n + z * h. x (B, I), h (B, H) -> h'.

    The reset gate multiplies W_hn h + b_hn (Keras' reset_after=True), so GRU keeps both biases even with
    keras_bias=True, as Keras' default GRU does."""

    gates = 3

    def __init__(self, input_size: int, hidden_size: int, keras_bias: bool = False) -> None:
        super().__init__(input_size, hidden_size, keras_bias=False)

    def step_projected(self, gi: Tensor, h: Tensor) -> Tensor:
        """gi = project_input(x) (B, 3H), h (B, H) -> h' (B, H)."""
        i_r, i_z, i_n = gi.chunk(3, dim=-1)
        h_r, h_z, h_n = self._hidden(h).chunk(3, dim=-1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h


CELL_CLASSES = {"elman": ElmanCell, "lstm": LSTMCell, "gru": GRUCell}
TORCH_RNNS = {"elman": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}


class RNNLayer(nn.Module):
    """A multi-layer, optionally bidirectional RNN, batch-first, with the state convention of torch.nn.RNN:
    h_n (layers * directions, B, H), plus c_n for LSTM.

    Args:
        cell: "elman", "lstm" or "gru". impl: "fused" (torch.nn.RNN/LSTM/GRU, cuDNN on GPU) or "scratch"
            (the cells above, looped over time). dropout: between layers. keras_bias: scratch only.

    Shape:
        forward: x (B, L, I), lengths (B,) or None, state or None -> outputs (B, L, dirs * H), final state.
        Positions past a sequence's length give zero outputs and do not touch its final state.
    """

    def __init__(self, cell: str, input_size: int, hidden_size: int, num_layers: int = 1, dropout: float = 0.0,
                 bidirectional: bool = False, impl: str = "fused", keras_bias: bool = False) -> None:
        super().__init__()
        if cell not in CELLS:
            raise AttnlabError(f"RNN cell {cell!r} is not one of {', '.join(CELLS)}")
        if impl not in IMPLS:
            raise AttnlabError(f"RNN impl {impl!r} is not one of {', '.join(IMPLS)}")
        if keras_bias and impl == "fused":
            raise AttnlabError("keras_bias needs impl = 'scratch' (torch's fused RNNs have two biases)")
        self.cell, self.impl, self.num_layers = cell, impl, num_layers
        self.hidden_size, self.dirs, self.dropout = hidden_size, 2 if bidirectional else 1, dropout
        if impl == "fused":
            self.rnn = TORCH_RNNS[cell](input_size, hidden_size, num_layers, batch_first=True,
                                        dropout=dropout if num_layers > 1 else 0.0, bidirectional=bidirectional)
        else:
            self.cells = nn.ModuleList(
                CELL_CLASSES[cell](input_size if layer == 0 else hidden_size * self.dirs, hidden_size, keras_bias)
                for layer in range(num_layers) for _ in range(self.dirs))

    # ------------------------------------------------------------------------------------------ fused
    def _forward_fused(self, x: Tensor, lengths: Tensor | None, state: State | None) -> tuple[Tensor, State]:
        if lengths is None:
            return self.rnn(x, state)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, final = self.rnn(packed, state)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # (B, L, dirs*H)
        return out, final

    # ------------------------------------------------------------------------------------------ scratch
    def _zeros(self, x: Tensor) -> State:
        h = x.new_zeros(self.num_layers * self.dirs, x.size(0), self.hidden_size)
        return (h, h.clone()) if self.cell == "lstm" else h

    def _run_direction(self, cell: _Cell, x: Tensor, keep: Tensor, state: State, reverse: bool
                       ) -> tuple[Tensor, State]:
        """One layer, one direction over time. x (B, L, I), keep (B, L) bool; state h or (h, c) (B, H)."""
        outs = []
        # all input projections in one matmul; unbind (not x[:, t]) so the backward is one stack rather than
        # a zero-filled (B, L, G*H) gradient per step
        gis, keeps = cell.project_input(x).unbind(1), keep.unbind(1)  # L x (B, G*H), L x (B,)
        steps = range(x.size(1) - 1, -1, -1) if reverse else range(x.size(1))
        for t in steps:
            new = cell.step_projected(gis[t], state)
            m = keeps[t][:, None]  # (B, 1): padded steps leave the state as it is
            state = tuple(torch.where(m, n, o) for n, o in zip(new, state)) if isinstance(new, tuple) \
                else torch.where(m, new, state)
            h = state[0] if isinstance(state, tuple) else state
            outs.append(h * m)
        if reverse:
            outs.reverse()
        return torch.stack(outs, dim=1), state  # (B, L, H)

    def _forward_scratch(self, x: Tensor, lengths: Tensor | None, state: State | None) -> tuple[Tensor, State]:
        B, L, _ = x.shape
        keep = (torch.ones(B, L, dtype=torch.bool, device=x.device) if lengths is None
                else torch.arange(L, device=x.device)[None, :] < lengths.to(x.device)[:, None])  # (B, L)
        state = self._zeros(x) if state is None else state
        finals_h, finals_c = [], []
        inp = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.dirs):
                k = layer * self.dirs + d
                s = (state[0][k], state[1][k]) if self.cell == "lstm" else state[k]
                out, s = self._run_direction(self.cells[k], inp, keep, s, reverse=d == 1)
                outs.append(out)
                finals_h.append(s[0] if self.cell == "lstm" else s)
                if self.cell == "lstm":
                    finals_c.append(s[1])
            inp = torch.cat(outs, dim=-1)  # (B, L, dirs*H)
            if layer < self.num_layers - 1 and self.dropout > 0:
                inp = nn.functional.dropout(inp, self.dropout, self.training)
        h_n = torch.stack(finals_h)  # (layers*dirs, B, H)
        return inp, (h_n, torch.stack(finals_c)) if self.cell == "lstm" else h_n

    # ------------------------------------------------------------------------------------------ public
    def forward(self, x: Tensor, lengths: Tensor | None = None, state: State | None = None) -> tuple[Tensor, State]:
        if self.impl == "fused":
            return self._forward_fused(x, lengths, state)
        return self._forward_scratch(x, lengths, state)

    def step(self, x: Tensor, state: State | None) -> tuple[Tensor, State]:
        """One time step of a unidirectional RNN: x (B, I) -> output of the top layer (B, H), new state."""
        assert self.dirs == 1, "step() is for unidirectional (decoder) RNNs"
        out, state = self.forward(x[:, None], None, state)  # (B, 1, H)
        return out[:, 0], state

    def load_torch_weights(self, torch_rnn: nn.RNNBase) -> None:
        """Copies the weights of a torch.nn.RNN/LSTM/GRU of the same shape (names weight_ih_l{k}{_reverse})."""
        src = self.rnn if self.impl == "fused" else None
        with torch.no_grad():
            for layer in range(self.num_layers):
                for d in range(self.dirs):
                    suffix = f"_l{layer}" + ("_reverse" if d else "")
                    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                        value = getattr(torch_rnn, name + suffix)
                        target = getattr(src, name + suffix) if src is not None \
                            else getattr(self.cells[layer * self.dirs + d], name)
                        if target is None:
                            raise AttnlabError("cannot load torch weights into a keras_bias RNN (one bias)")
                        target.copy_(value)
