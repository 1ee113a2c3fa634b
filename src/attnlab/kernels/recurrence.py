"""The GRU recurrences with their backward derived by hand, for training on the CPU: one GRU layer over time
(`GRURecurrence`, twin torch.nn.GRU) and the teacher-forced recurrence of the Bahdanau GRU decoder
(`BahdanauGRURecurrence`, twin the decoder's step-by-step autograd in `attnlab.nn.rnn_seq2seq`).

Through autograd, torch's GRU records a graph step by step and its backward costs several times its forward. Here
each step is one batched product and the gates, no graph; the weight gradients are one product over all steps
at the end. The models call `by_hand(x)` to choose: on the CPU, when gradients are recorded, with the kernels on
(`attnlab.kernels.switch`); for inference and on GPUs (cuDNN) torch's GRU runs. Figures:
`benchmarks/rnn_recurrence_bench.py`, docs/results.md.

Shape legend: S steps, D directions, B batch, H hidden size (3H: the gates r, z, n in torch's order), I input size,
T target steps, A attention dim, E embedding dim, He encoder output dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.kernels.switch import enabled


def by_hand(x: Tensor) -> bool:
    """Whether a GRU over x trains through the recurrences here instead of torch's autograd: on the CPU, when
    gradients are recorded, with the kernels on."""
    return x.device.type == "cpu" and torch.is_grad_enabled() and enabled()


# ---------------------------------------------------------------------------------------------- one GRU step
def gru_update(gi: Tensor, gh: Tensor, h: Tensor, saved: Tensor, out: Tensor) -> Tensor:
    """The GRU's equations (Cho et al. 2014 in torch's form, `attnlab.nn.rnn.GRUCell`) on projected inputs,
    without autograd, keeping what the backward needs.

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


# ---------------------------------------------------------------------------------------------- GRU layer
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


def _in_own_order(t: Tensor) -> Tensor:
    """(L, D, ...) in time order -> each direction in its own order (the reverse direction's time flipped),
    contiguous; applied twice, time order again."""
    if t.size(1) == 1:
        return t.contiguous()
    return torch.stack([t[:, 0], t[:, 1].flip(0)], dim=1)


def gru_layers(gru: nn.GRU, x: Tensor, lengths: Tensor | None, state: Tensor | None) -> tuple[Tensor, Tensor]:
    """What a batch-first torch.nn.GRU computes over x with these lengths (as over a packed sequence), on its own
    weights, through `GRURecurrence`: the input projections of all steps and both directions in one product per
    layer; dropout between layers as nn.GRU applies it.

    Args:
        gru: a batch-first torch.nn.GRU with biases. x: (B, L, I). lengths: (B,) in [1, L], or None.
        state: h_0 (layers * D, B, H), or None for zeros.
    Returns:
        outputs of the top layer (B, L, D * H) (zeros at padded steps), h_n (layers * D, B, H).
    """
    B, L = x.size(0), x.size(1)
    D, H = 2 if gru.bidirectional else 1, gru.hidden_size
    steps = torch.arange(L, device=x.device)
    keep = (steps[None, :] < lengths.to(x.device)[:, None] if lengths is not None
            else torch.ones(B, L, dtype=torch.bool, device=x.device)).to(x.dtype)  # (B, L)
    keep = _in_own_order(keep.T[:, None].expand(L, D, B))[..., None]  # (L, D, B, 1)
    h0 = x.new_zeros(gru.num_layers * D, B, H) if state is None else state
    inp, finals = x, []
    for layer in range(gru.num_layers):
        names = [f"l{layer}{'_reverse' if d else ''}" for d in range(D)]
        w_ih = torch.cat([getattr(gru, "weight_ih_" + n) for n in names])  # (D * 3H, I)
        b_ih = torch.cat([getattr(gru, "bias_ih_" + n) for n in names])
        w_hh = torch.stack([getattr(gru, "weight_hh_" + n) for n in names])  # (D, 3H, H)
        b_hh = torch.stack([getattr(gru, "bias_hh_" + n) for n in names])  # (D, 3H)
        gi = F.linear(inp, w_ih, b_ih).view(B, L, D, 3 * H).permute(1, 2, 0, 3)  # (L, D, B, 3H)
        out, h_n = GRURecurrence.apply(_in_own_order(gi), keep, h0[layer * D:(layer + 1) * D], w_hh, b_hh)
        inp = _in_own_order(out).permute(2, 0, 1, 3).reshape(B, L, D * H)  # (B, L, D*H)
        finals.append(h_n)
        if layer < gru.num_layers - 1 and gru.dropout > 0:
            inp = F.dropout(inp, gru.dropout, gru.training)
    return inp, torch.cat(finals)


# ---------------------------------------------------------------------------------------------- Bahdanau decoder
class BahdanauGRURecurrence(torch.autograd.Function):
    """The teacher-forced recurrence of the Bahdanau GRU decoder (`RNNSeq2Seq._bahdanau_recur` over all steps)
    with its backward derived by hand, for CPU training: no autograd graph per step, and the weight gradients
    as one product over all steps at the end. Tested against the step-by-step model in float64.

    Per step: q = W_a s_{t-1}; alpha_t = masked softmax(v_a . tanh(K + q)); the GRU input projection of
    c_t = alpha_t V is alpha_t (V W_ic^T), so the context never passes the (He x 3H) product step by step;
    s_t = GRU(gi_e_t + alpha_t V', s_{t-1}). tanh(x) = 2 sigmoid(2x) - 1, as in `attnlab.kernels.attention`
    (torch's CPU tanh is slower than its sigmoid on the same tensor).

    forward(gi_e (B, T, 3H) = W_ie e_t + b_ih; s0 (B, H); keys (B, S, A) = U_a h_j + b; vproj (B, S, 3H) = V W_ic^T;
    mask (B, S) bool; w_hq (3H + A, H) = [W_hh; W_a]; b_hh (3H,); v_a (A,)) -> states s_t (B, T, H) and
    weights alpha (B, T, S).
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)  # elementwise bf16 is slow on CPUs
    def forward(ctx, gi_e: Tensor, s0: Tensor, keys: Tensor, vproj: Tensor, mask: Tensor, w_hq: Tensor,
                b_hh: Tensor, v_a: Tensor) -> tuple[Tensor, Tensor]:
        B, T, G = gi_e.shape
        H, S = G // 3, keys.size(1)
        gi_steps = gi_e.transpose(0, 1)  # (T, B, 3H)
        hs = gi_e.new_empty(T + 1, B, H)  # hs[t]: the state before step t
        hs[0] = s0
        alphas = gi_e.new_empty(T, B, S)
        saved = gi_e.new_empty(T, 4, B, H)
        sig = []  # sigmoid(2 (K + q)) per step, (B, S, A)
        keep, drop = mask.to(gi_e.dtype), ~mask
        w2 = torch.cat([w_hq[:G], 2 * w_hq[G:]]).T.contiguous()  # (H, 3H + A), the query part doubled
        keys2, v2, v_sum = 2 * keys, 2 * v_a, v_a.sum()
        fill = torch.finfo(gi_e.dtype).min
        for t in range(T):
            hq = hs[t] @ w2  # (B, 3H + A): W_hh s and 2 W_a s in one product
            s = torch.add(keys2, hq[:, None, G:]).sigmoid_()  # (B, S, A)
            sig.append(s)
            scores = (s @ v2).sub_(v_sum).masked_fill_(drop, fill)  # v_a . tanh(K + q): (B, S)
            alpha = torch.mul(torch.softmax(scores, -1), keep, out=alphas[t])
            gi = torch.baddbmm(gi_steps[t][:, None], alpha[:, None], vproj)[:, 0]  # (B, 3H)
            gru_update(gi, hq[:, :G].add_(b_hh), hs[t], saved[t], hs[t + 1])
        ctx.save_for_backward(hs, alphas, saved, vproj, w_hq, v_a, *sig)
        return hs[1:].transpose(0, 1), alphas.transpose(0, 1)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, d_states: Tensor, d_alphas: Tensor) -> tuple[Tensor | None, ...]:
        hs, alphas, saved, vproj, w_hq, v_a, *sig = ctx.saved_tensors
        T, B, S = alphas.shape
        H = hs.size(-1)
        G = 3 * H
        d_states, d_alphas = d_states.transpose(0, 1), d_alphas.transpose(0, 1)  # (T, B, H), (T, B, S)
        d_hq = hs.new_empty(T, B, w_hq.size(0))  # (T, B, 3H + A)
        d_gi = hs.new_empty(T, B, G)
        d_keys = torch.zeros_like(sig[0])
        d_v = torch.zeros_like(v_a)
        dh = torch.zeros_like(hs[0])
        vproj_t = vproj.transpose(1, 2).contiguous()  # (B, 3H, S)
        v4 = 4 * v_a
        for t in range(T - 1, -1, -1):
            dh = dh + d_states[t]
            dh_z = gru_update_backward(dh, hs[t], saved[t], d_gi[t], d_hq[t, :, :G])
            d_alpha = torch.baddbmm(d_alphas[t][:, None], d_gi[t][:, None], vproj_t)[:, 0]  # (B, S)
            a_d = alphas[t] * d_alpha
            d_scores = a_d.sub_(alphas[t] * a_d.sum(-1, keepdim=True))  # softmax backward; 0 where masked
            s = sig[t]
            d_v.add_((d_scores.reshape(1, -1) @ s.reshape(-1, s.size(-1)))[0], alpha=2.0).sub_(d_scores.sum())
            d_pre = torch.addcmul(s, s, s, value=-1).mul_(d_scores[:, :, None]).mul_(v4)  # 4 s (1 - s) = tanh'
            torch.sum(d_pre, 1, out=d_hq[t, :, G:])  # dL/dq
            d_keys.add_(d_pre)
            dh = torch.addmm(dh_z, d_hq[t], w_hq)
        d_w = d_hq.reshape(T * B, -1).T @ hs[:-1].reshape(T * B, H)  # (3H + A, H)
        d_vproj = torch.bmm(alphas.permute(1, 2, 0), d_gi.transpose(0, 1))  # (B, S, 3H)
        return d_gi.transpose(0, 1), dh, d_keys, d_vproj, None, d_w, d_hq[..., :G].sum((0, 1)), d_v


def bahdanau_gru_decoder(gru: nn.GRU, emb: Tensor, s0: Tensor, keys: Tensor, values: Tensor, mask: Tensor,
                         W_a: Tensor, v_a: Tensor) -> tuple[Tensor, Tensor]:
    """The Bahdanau GRU decoder's recurrence over all T steps through `BahdanauGRURecurrence`, on the model's own
    weights: the one-layer torch.nn.GRU whose input is [e_{t-1}; c_t], and the additive score's W_a and v_a.

    Args:
        gru: the decoder's torch.nn.GRU (one layer, input E + He). emb: e_{t-1} (B, T, E). s0: (B, H).
        keys: U_a h_j + b (B, S, A). values: h_j (B, S, He). mask: (B, S) bool. W_a: (A, H). v_a: (A,).
    Returns:
        states s_t (B, T, H), attention weights (B, T, S).
    """
    E = emb.size(-1)
    w_ih = gru.weight_ih_l0  # (3H, E + He): [W_ie W_ic], the input being [e_{t-1}; c_t]
    gi_e = F.linear(emb, w_ih[:, :E], gru.bias_ih_l0)  # (B, T, 3H)
    vproj = F.linear(values, w_ih[:, E:])  # (B, S, 3H)
    w_hq = torch.cat([gru.weight_hh_l0, W_a])  # (3H + A, H)
    return BahdanauGRURecurrence.apply(gi_e, s0, keys, vproj, mask, w_hq, gru.bias_hh_l0, v_a)
