"""Recurrent cells written out from their equations, and a layer that runs them or torch's fused RNNs.

Cells keep torch's parameter names and layouts (weight_ih (G*H, I), weight_hh (G*H, H), bias_ih, bias_hh;
gates in torch's order), so weights copy between `impl="scratch"` and `impl="fused"`.

Shape legend: B batch, L sequence length, I input size, H hidden size, G gates (1 Elman, 4 LSTM, 3 GRU).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import math
from collections.abc import Iterator

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab.core.errors import AttnlabError

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


# ---------------------------------------------------------------------------------- GRU, backward by hand
def gru_update(gi: Tensor, gh: Tensor, h: Tensor, saved: Tensor, out: Tensor) -> Tensor:
    """GRUCell's equations on projected inputs, without autograd, keeping what the backward needs.

    Args:
        gi: W_ih x + b_ih (..., 3H); gh: W_hh h + b_hh (..., 3H), overwritten; h: the state (..., H).
        saved: (4, ..., H), receives r, z, n and W_hn h + b_hn for `gru_update_backward`.
        out: (..., H), receives h' = n + z (h - n) (= (1 - z) n + z h).
    Returns:
        out.
    """
    H = h.size(-1)
    r, z, n, h_n = saved.unbind(0)
    torch.sigmoid(gh[..., :H].add_(gi[..., :H]), out=r)
    torch.sigmoid(gh[..., H:2 * H].add_(gi[..., H:2 * H]), out=z)
    h_n.copy_(gh[..., 2 * H:])
    torch.tanh(torch.addcmul(gi[..., 2 * H:], r, h_n), out=n)
    return torch.addcmul(n, z, h - n, out=out)


def gru_update_backward(dh: Tensor, h: Tensor, saved: Tensor, dgi: Tensor, dgh: Tensor) -> Tensor:
    """The backward of `gru_update`: dh = dL/dh' (..., H) and the step's h and saved -> dgi = dL/dgi and
    dgh = dL/dgh written into (..., 3H) buffers; returns z * dh, the part of dL/dh that does not pass W_hh."""
    H = h.size(-1)
    r, z, n, h_n = saved.unbind(0)
    dn = torch.mul(dh * (1 - z), 1 - n * n, out=dgi[..., 2 * H:])  # through tanh
    torch.mul(dh * (h - n), z * (1 - z), out=dgi[..., H:2 * H])
    torch.mul(dn * h_n, r * (1 - r), out=dgi[..., :H])
    dgh[..., :2 * H].copy_(dgi[..., :2 * H])
    torch.mul(dn, r, out=dgh[..., 2 * H:])
    return dh * z


class GRURecurrence(torch.autograd.Function):
    """One GRU layer over time in D directions at once (D = 2: the second runs backwards), its backward derived
    by hand: per step one batched (D, B, H) x (D, H, 3H) product and the gates, no autograd graph; the weight
    gradients are one product over all steps at the end. Same function as torch.nn.GRU over a packed sequence
    (a padded step keeps the state and outputs zeros), tested against it in float64.

    forward(gi (S, D, B, 3H): W_ih x + b_ih, each direction in its own time order; keep (S, D, B, 1) float,
    1 for real steps; h0 (D, B, H); w_hh (D, 3H, H); b_hh (D, 3H)) -> outputs (S, D, B, H), h_n (D, B, H).
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)  # elementwise bf16 is slow on CPUs
    def forward(ctx, gi: Tensor, keep: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Tensor) -> tuple[Tensor, Tensor]:
        S, D, B, G = gi.shape
        H = G // 3
        hs = gi.new_empty(S + 1, D, B, H)  # hs[i]: the state before step i
        hs[0] = h0
        saved = gi.new_empty(S, 4, D, B, H)
        new = gi.new_empty(D, B, H)
        w_t, bias = w_hh.transpose(1, 2), b_hh[:, None, :]  # (D, H, 3H), (D, 1, 3H)
        for i in range(S):
            gh = torch.baddbmm(bias, hs[i], w_t)  # (D, B, 3H)
            gru_update(gi[i], gh, hs[i], saved[i], new)
            torch.addcmul(hs[i], keep[i], new - hs[i], out=hs[i + 1])  # a padded step keeps the state
        ctx.save_for_backward(hs, saved, keep, w_hh)
        return hs[1:] * keep, hs[S]

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, d_out: Tensor, d_hn: Tensor) -> tuple[Tensor, None, Tensor, Tensor, Tensor]:
        hs, saved, keep, w_hh = ctx.saved_tensors
        S, D, B, H = d_out.shape
        d_gi, d_gh = hs.new_empty(S, D, B, 3 * H), hs.new_empty(S, D, B, 3 * H)
        dh = d_hn.clone()
        for i in range(S - 1, -1, -1):
            m = keep[i]
            dh.addcmul_(m, d_out[i])  # outputs are m * h
            d_new = dh * m
            dh_z = gru_update_backward(d_new, hs[i], saved[i], d_gi[i], d_gh[i])
            # h_{i+1} = h_i + m (new - h_i): (1 - m) dh passes straight through
            dh = torch.baddbmm(dh_z.addcmul_(1 - m, dh), d_gh[i], w_hh)
        flat_dgh = d_gh.transpose(0, 1).reshape(D, S * B, 3 * H)
        d_w = torch.bmm(flat_dgh.transpose(1, 2), hs[:-1].transpose(0, 1).reshape(D, S * B, H))  # (D, 3H, H)
        return d_gi, None, dh, d_w, flat_dgh.sum(1)


_BY_HAND = contextvars.ContextVar("attnlab_recurrences_by_hand", default=True)


def recurrence_by_hand(x: Tensor) -> bool:
    """Whether a GRU over x trains through the hand-derived recurrences (`GRURecurrence` here, the Bahdanau
    decoder's in `attnlab.nn.rnn_seq2seq`) instead of torch's: on the CPU, when gradients are recorded, outside
    `autograd_recurrences()`. There, torch's GRU records an autograd graph step by step and its backward costs
    3.5x its forward (docs/results.md, "the GRU's recurrences with their backward by hand"); for inference, and
    on GPUs (cuDNN), torch's runs.
    """
    return _BY_HAND.get() and x.device.type == "cpu" and torch.is_grad_enabled()


@contextlib.contextmanager
def autograd_recurrences() -> Iterator[None]:
    """Within this block the GRU recurrences train through torch's autograd step by step, as before
    `recurrence_by_hand`: the reference that the hand-derived backward is tested and benchmarked against."""
    token = _BY_HAND.set(False)
    try:
        yield
    finally:
        _BY_HAND.reset(token)


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
        if self.cell == "gru" and recurrence_by_hand(x):
            return self._forward_gru_recurrence(x, lengths, state)
        if lengths is None:
            return self.rnn(x, state)
        # enforce_sorted=False: torch sorts by length and permutes the given state and h_n to match
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, final = self.rnn(packed, state)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # (B, L, dirs*H)
        return out, final

    @staticmethod
    def _in_own_order(t: Tensor) -> Tensor:
        """(L, D, ...) in time order -> each direction in its own order (the reverse direction's time flipped),
        contiguous; applied twice, time order again."""
        if t.size(1) == 1:
            return t.contiguous()
        return torch.stack([t[:, 0], t[:, 1].flip(0)], dim=1)

    def _forward_gru_recurrence(self, x: Tensor, lengths: Tensor | None, state: Tensor | None
                                ) -> tuple[Tensor, Tensor]:
        """torch.nn.GRU's function on its own weights through `GRURecurrence`: the input projections of all
        steps and both directions in one product per layer; dropout between layers as nn.GRU applies it."""
        B, L, D, H = x.size(0), x.size(1), self.dirs, self.hidden_size
        steps = torch.arange(L, device=x.device)
        keep = (steps[None, :] < lengths.to(x.device)[:, None] if lengths is not None
                else torch.ones(B, L, dtype=torch.bool, device=x.device)).to(x.dtype)  # (B, L)
        keep = self._in_own_order(keep.T[:, None].expand(L, D, B))[..., None]  # (L, D, B, 1)
        h0 = x.new_zeros(self.num_layers * D, B, H) if state is None else state
        inp, finals = x, []
        for layer in range(self.num_layers):
            names = [f"l{layer}{'_reverse' if d else ''}" for d in range(D)]
            w_ih = torch.cat([getattr(self.rnn, "weight_ih_" + n) for n in names])  # (D * 3H, I)
            b_ih = torch.cat([getattr(self.rnn, "bias_ih_" + n) for n in names])
            w_hh = torch.stack([getattr(self.rnn, "weight_hh_" + n) for n in names])  # (D, 3H, H)
            b_hh = torch.stack([getattr(self.rnn, "bias_hh_" + n) for n in names])  # (D, 3H)
            gi = nn.functional.linear(inp, w_ih, b_ih).view(B, L, D, 3 * H).permute(1, 2, 0, 3)  # (L, D, B, 3H)
            out, h_n = GRURecurrence.apply(self._in_own_order(gi), keep, h0[layer * D:(layer + 1) * D], w_hh, b_hh)
            inp = self._in_own_order(out).permute(2, 0, 1, 3).reshape(B, L, D * H)  # (B, L, D*H)
            finals.append(h_n)
            if layer < self.num_layers - 1 and self.dropout > 0:
                inp = nn.functional.dropout(inp, self.dropout, self.training)
        return inp, torch.cat(finals)

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
