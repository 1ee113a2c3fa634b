"""Recurrent cells written out from their equations, and a layer that runs them or torch's fused RNNs.

Cells keep torch's parameter names and layouts (weight_ih (G*H, I), weight_hh (G*H, H), bias_ih, bias_hh;
gates in torch's order), so weights copy between `impl="scratch"` and `impl="fused"`. A fused GRU that trains on
the CPU runs through `attnlab.kernels.recurrence` (torch.nn.GRU's function, its backward derived by hand) while
the kernels are on.

Shape legend: B batch, L sequence length, I input size, H hidden size, G gates (1 Elman, 4 LSTM, 3 GRU).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab.core.errors import AttnlabError
from attnlab.kernels import recurrence

CELLS = ("elman", "lstm", "gru")
IMPLS = ("fused", "scratch")
State = Tensor | tuple[Tensor, Tensor]


class _Cell(nn.Module):
    """Shared parameters of the cells below, initialised as torch's: U(-1/sqrt(H), 1/sqrt(H))."""

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, keras_bias: bool = False) -> None:
        super().__init__()
        G, H = self.gates, hidden_size
        self.input_size, self.hidden_size, self.keras_bias = input_size, hidden_size, keras_bias
        self.weight_ih = nn.Parameter(torch.empty(G * H, input_size))
        self.weight_hh = nn.Parameter(torch.empty(G * H, H))
        self.bias_ih = nn.Parameter(torch.empty(G * H))
        # Keras keeps one bias per gate; torch (and cuDNN) keep two, b_ih and b_hh, that only ever appear summed
        # in Elman and LSTM, so one of them is redundant there.
        self.register_parameter("bias_hh", None if keras_bias else nn.Parameter(torch.empty(G * H)))
        bound = 1.0 / math.sqrt(H)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def init_state(self, x: Tensor) -> State:
        """Zero state for the batch of x (B, ...): h (B, H), or (h, c) for LSTM."""
        return x.new_zeros(x.size(0), self.hidden_size)

    def project_input(self, x: Tensor) -> Tensor:
        """W_ih x + b_ih for any leading dims: (..., I) -> (..., G*H). Over a whole sequence this is one
        matmul instead of one per step."""
        return x @ self.weight_ih.T + self.bias_ih

    def _hidden(self, h: Tensor) -> Tensor:
        gh = h @ self.weight_hh.T  # (B, G*H)
        return gh if self.bias_hh is None else gh + self.bias_hh

    def step_projected(self, gi: Tensor, state: State) -> State:
        raise NotImplementedError

    def forward(self, x: Tensor, state: State | None = None) -> State:
        """One step from the input x (B, I) and the state (zeros when None) to the new state."""
        return self.step_projected(self.project_input(x), self.init_state(x) if state is None else state)


class ElmanCell(_Cell):
    """Elman (1990), "Finding structure in time": h' = tanh(W_ih x + b_ih + W_hh h + b_hh).
    x (B, I), h (B, H) -> h' (B, H). keras_bias=True drops b_hh (Keras SimpleRNN: (I + H + 1) * H params)."""

    gates = 1

    def step_projected(self, gi: Tensor, h: Tensor) -> Tensor:
        """gi = project_input(x) (B, H), h (B, H) -> h' (B, H)."""
        return torch.tanh(gi + self._hidden(h))


class LSTMCell(_Cell):
    """LSTM (Hochreiter & Schmidhuber 1997, forget gate of Gers et al. 2000), gates i, f, g, o in torch's order:
    [i, f, g, o] = W_ih x + b_ih + W_hh h + b_hh;  c' = σ(f) * c + σ(i) * tanh(g);  h' = σ(o) * tanh(c').
    x (B, I), (h, c) (B, H) each -> (h', c'). keras_bias=True drops b_hh (Keras LSTM: 4 (I + H + 1) H params)."""

    gates = 4

    def init_state(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = x.new_zeros(x.size(0), self.hidden_size)  # (B, H)
        return h, h.clone()

    def step_projected(self, gi: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """gi = project_input(x) (B, 4H), (h, c) -> (h', c')."""
        h, c = state
        i, f, g, o = (gi + self._hidden(h)).chunk(4, dim=-1)  # (B, H) each
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class GRUCell(_Cell):
    """GRU (Cho et al. 2014, eqs. 5-8) in torch's form, gates r, z, n:
    r = σ(W_ir x + b_ir + W_hr h + b_hr),  z = σ(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),  h' = (1 - z) * n + z * h.  x (B, I), h (B, H) -> h' (B, H).

    The reset gate multiplies W_hn h + b_hn, which is Keras' default GRU (reset_after=True), and that GRU has
    two biases too, 3 (I + H + 2) H params: so keras_bias is accepted and changes nothing here."""

    gates = 3

    def __init__(self, input_size: int, hidden_size: int, keras_bias: bool = False) -> None:
        super().__init__(input_size, hidden_size, keras_bias=False)

    def step_projected(self, gi: Tensor, h: Tensor) -> Tensor:
        """gi = project_input(x) (B, 3H), h (B, H) -> h' (B, H)."""
        i_r, i_z, i_n = gi.chunk(3, dim=-1)  # (B, H) each
        h_r, h_z, h_n = self._hidden(h).chunk(3, dim=-1)  # (B, H) each
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h


CELL_CLASSES = {"elman": ElmanCell, "lstm": LSTMCell, "gru": GRUCell}
TORCH_RNNS = {"elman": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}


class RNNLayer(nn.Module):
    """A multi-layer, optionally bidirectional RNN, batch-first, with the state convention of torch.nn.RNN:
    h_n (layers * dirs, B, H), or (h_n, c_n) for LSTM; index k = layer * dirs + d, d = 1 the backward direction.

    Args:
        cell: "elman", "lstm" or "gru". impl: "fused" (torch.nn.RNN/LSTM/GRU, cuDNN on GPU) or "scratch" (the
            cells above, looped over time). dropout: on the outputs of every layer but the last.
            keras_bias: one bias per gate (scratch only; see the cells).

    Weights: with impl="scratch", `cells[layer * dirs + d]` holds torch's `{weight,bias}_{ih,hh}_l{layer}` (d = 0)
    and `..._l{layer}_reverse` (d = 1) under the names without the suffix; `load_torch_weights` and `to_torch`
    copy them in and out, and work the same with impl="fused".

    Shape:
        forward: x (B, L, I), lengths (B,) or None, state or None -> outputs (B, L, dirs * H), final state.
        With lengths, positions t >= length give zero outputs and do not touch the final state; the backward
        direction starts at each sequence's last real token. step: x (B, I) -> top output (B, H), state.
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
        if num_layers < 1 or not 0.0 <= dropout < 1.0:
            raise AttnlabError(f"RNN num_layers ({num_layers}) must be >= 1 and dropout ({dropout}) in [0, 1)")
        self.cell, self.impl, self.num_layers, self.input_size = cell, impl, num_layers, input_size
        self.hidden_size, self.dirs, self.dropout = hidden_size, 2 if bidirectional else 1, dropout
        if impl == "fused":
            self.rnn = TORCH_RNNS[cell](input_size, hidden_size, num_layers, batch_first=True,
                                        dropout=dropout if num_layers > 1 else 0.0, bidirectional=bidirectional)
        else:
            self.cells = nn.ModuleList(
                CELL_CLASSES[cell](input_size if layer == 0 else hidden_size * self.dirs, hidden_size, keras_bias)
                for layer in range(num_layers) for _ in range(self.dirs))

    def _check(self, x: Tensor, lengths: Tensor | None) -> None:
        if x.dim() != 3 or x.size(2) != self.input_size:
            raise AttnlabError(f"RNN input has shape {tuple(x.shape)}, expected (B, L, {self.input_size})")
        if lengths is not None:
            lens = lengths.cpu()
            if lens.shape != (x.size(0),) or lens.min() < 1 or lens.max() > x.size(1):
                raise AttnlabError(f"RNN lengths {lens.tolist()} must be a (B,) = ({x.size(0)},) tensor of "
                                   f"values in [1, {x.size(1)}]")

    def _forward_fused(self, x: Tensor, lengths: Tensor | None, state: State | None) -> tuple[Tensor, State]:
        if self.cell == "gru" and recurrence.by_hand(x):  # the same function, its backward by hand (CPU training)
            return recurrence.gru_layers(self.rnn, x, lengths, state)
        if lengths is None:
            return self.rnn(x, state)
        # enforce_sorted=False: torch sorts by length and permutes the given state and h_n to match
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, final = self.rnn(packed, state)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # (B, L, dirs*H)
        return out, final

    @staticmethod
    def _run_direction(cell: _Cell, x: Tensor, keep: Tensor | None, state: State, reverse: bool
                       ) -> tuple[Tensor, State]:
        """One layer, one direction over time. x (B, L, I), keep (B, L) bool or None; state h or (h, c)."""
        outs = []
        # all input projections in one matmul; unbind (not x[:, t]) so the backward is one stack rather than
        # a zero-filled (B, L, G*H) gradient per step
        gis = cell.project_input(x).unbind(1)  # L x (B, G*H)
        keeps = keep.unbind(1) if keep is not None else None  # L x (B,)
        for t in (range(x.size(1) - 1, -1, -1) if reverse else range(x.size(1))):
            new = cell.step_projected(gis[t], state)
            if keeps is None:
                state = new
                outs.append(new[0] if isinstance(new, tuple) else new)
                continue
            m = keeps[t][:, None]  # (B, 1): a padded step leaves the state as it is and outputs zeros
            state = (tuple(torch.where(m, n, o) for n, o in zip(new, state)) if isinstance(new, tuple)
                     else torch.where(m, new, state))
            outs.append((state[0] if isinstance(state, tuple) else state) * m)
        if reverse:
            outs.reverse()
        return torch.stack(outs, dim=1), state  # (B, L, H)

    def _forward_scratch(self, x: Tensor, lengths: Tensor | None, state: State | None) -> tuple[Tensor, State]:
        L = x.size(1)
        keep = None if lengths is None else \
            torch.arange(L, device=x.device)[None, :] < lengths.to(x.device)[:, None]  # (B, L)
        lstm = self.cell == "lstm"
        finals_h, finals_c = [], []
        inp = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.dirs):
                k = layer * self.dirs + d
                cell = self.cells[k]
                s = cell.init_state(x) if state is None else (state[0][k], state[1][k]) if lstm else state[k]
                out, s = self._run_direction(cell, inp, keep, s, reverse=d == 1)
                outs.append(out)
                finals_h.append(s[0] if lstm else s)
                if lstm:
                    finals_c.append(s[1])
            inp = torch.cat(outs, dim=-1)  # (B, L, dirs*H)
            if layer < self.num_layers - 1 and self.dropout > 0:
                inp = nn.functional.dropout(inp, self.dropout, self.training)
        h_n = torch.stack(finals_h)  # (layers*dirs, B, H)
        return inp, (h_n, torch.stack(finals_c)) if lstm else h_n

    def forward(self, x: Tensor, lengths: Tensor | None = None, state: State | None = None) -> tuple[Tensor, State]:
        """x (B, L, I), lengths (B,) in [1, L] or None, state (h_0 or (h_0, c_0), each (layers*dirs, B, H)) or
        None for zeros -> outputs of the top layer (B, L, dirs*H), final state in the same layout as state."""
        self._check(x, lengths)
        if self.impl == "fused":
            return self._forward_fused(x, lengths, state)
        return self._forward_scratch(x, lengths, state)

    def step(self, x: Tensor, state: State | None) -> tuple[Tensor, State]:
        """One time step of a unidirectional RNN (a decoder's): x (B, I) -> top layer's output (B, H), state."""
        if self.dirs != 1:
            raise AttnlabError("RNNLayer.step() needs a unidirectional RNN (bidirectional=False)")
        out, state = self.forward(x[:, None], None, state)  # (B, 1, H)
        return out[:, 0], state

    def _slots(self) -> list[tuple[str, nn.Module, str]]:
        """(torch name, module holding it, its name there) for every weight, in torch.nn.RNN's naming."""
        slots = []
        for layer in range(self.num_layers):
            for d in range(self.dirs):
                suffix = f"_l{layer}" + ("_reverse" if d else "")
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    slots.append((name + suffix, self.rnn, name + suffix) if self.impl == "fused"
                                 else (name + suffix, self.cells[layer * self.dirs + d], name))
        return slots

    @torch.no_grad()
    def load_torch_weights(self, torch_rnn: nn.RNNBase) -> None:
        """Copies the weights of a torch.nn.RNN/LSTM/GRU of the same shape (weight_ih_l{k}{_reverse}, ...).
        Into a keras_bias layer (one bias) b_ih + b_hh goes to bias_ih, which computes the same function."""
        want = TORCH_RNNS[self.cell]
        shape = (self.input_size, self.hidden_size, self.num_layers, self.dirs == 2)
        got = (torch_rnn.input_size, torch_rnn.hidden_size, torch_rnn.num_layers, torch_rnn.bidirectional)
        if not isinstance(torch_rnn, want) or got != shape or not torch_rnn.bias or torch_rnn.proj_size:
            raise AttnlabError(f"cannot load {torch_rnn} into a {self.cell} RNNLayer of (input, hidden, layers, "
                               f"bidirectional) = {shape}; need a {want.__name__} of that shape, bias, no proj_size")
        for torch_name, module, name in self._slots():
            value = getattr(torch_rnn, torch_name)
            if getattr(module, name) is not None:
                getattr(module, name).copy_(value)
            else:  # keras_bias: fold b_hh into b_ih, which _slots lists (and so copied) just before
                module.bias_ih.add_(value)

    @torch.no_grad()
    def to_torch(self) -> nn.RNNBase:
        """A torch.nn.RNN/LSTM/GRU (batch_first) computing the same function, e.g. to run a scratch-trained
        model with cuDNN. A keras_bias layer's missing b_hh becomes zeros."""
        if self.impl == "fused":
            return copy.deepcopy(self.rnn)
        ref = self.cells[0].weight_ih
        out = TORCH_RNNS[self.cell](self.input_size, self.hidden_size, self.num_layers, batch_first=True,
                                    dropout=self.dropout if self.num_layers > 1 else 0.0,
                                    bidirectional=self.dirs == 2, device=ref.device, dtype=ref.dtype)
        for torch_name, module, name in self._slots():
            value = getattr(module, name)
            getattr(out, torch_name).copy_(value if value is not None else torch.zeros_like(module.bias_ih))
        return out
