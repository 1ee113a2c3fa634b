# The experiment of docs/results.md ("Issue 23 and the suite, session of 2026-11-26 (2)"): the demo GRU's decoder with
# the embedding half of the GRU input projection hoisted out of the time loop, against the model's own forward,
# alternated step by step on 35 demo batches, fp32. Run from the repository root:
#   PYTHONPATH=src .venv/bin/python docs/results/session_20261126b/rnn_hoist_experiment.py 1
# Output on the Zen 3 EPYC (1 thread): max diff 1.79e-07; eager 1796 tok/s; hoisted 1837 tok/s; ratio 1.022
import sys, time, copy, torch
sys.path.insert(0, "benchmarks")
from rnn_step_profile import config_batches, training_step
from attnlab.experiment import build_seq2seq, load_experiment
from attnlab.rnn_seq2seq import RNNSeq2Seq, DecoderState
import torch.nn.functional as F

EAGER = RNNSeq2Seq.forward

def hoisted_forward(self, src, src_lengths, tgt_in):
    enc = self.encode(src, src_lengths)
    state = self.init_state(enc)
    emb = self.dropout(self.embed(tgt_in))
    rnn = self.rnn.rnn
    E = emb.size(-1)
    w_ih, w_hh, b_ih, b_hh = rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0
    gi_e = F.linear(emb, w_ih[:, :E], b_ih)  # (B, T, 3H)
    w_ic = w_ih[:, E:]
    h = state.hidden[:, 0]  # (B, H)
    hs, contexts = [], []
    for gi_t in gi_e.unbind(1):
        context, _ = self.attention(h[:, None], enc.keys, enc.values, enc.mask, precomputed=True)
        c = context[:, 0]
        gi = gi_t + F.linear(c, w_ic)
        gh = F.linear(h, w_hh, b_hh)
        i_r, i_z, i_n = gi.chunk(3, -1)
        h_r, h_z, h_n = gh.chunk(3, -1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        h = n + z * (h - n)
        hs.append(h); contexts.append(c)
    outputs = self._deep_output(torch.stack(hs, 1), torch.stack(contexts, 1), emb)
    return self.generator(self.dropout(outputs))

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
cfg = load_experiment("configs/demo.toml")
batches, toks = config_batches(cfg, 40)
torch.manual_seed(0)
base = build_seq2seq(cfg, toks).train()
# equivalence check (eval mode: no dropout)
b = batches[0]
m = copy.deepcopy(base).eval()
with torch.no_grad():
    a = EAGER(m, b.src, b.src_lengths, b.tgt_in); h = hoisted_forward(m, b.src, b.src_lengths, b.tgt_in)
print("max diff", (a - h).abs().max().item())
models = {"eager": base, "hoisted": copy.deepcopy(base)}
fwd = {"eager": EAGER, "hoisted": hoisted_forward}
opts = {k: torch.optim.AdamW(v.parameters(), lr=1e-3) for k, v in models.items()}
secs = {k: 0.0 for k in models}; toks_n = 0
for i, b in enumerate(batches):
    for k in (["eager", "hoisted"] if i % 2 else ["hoisted", "eager"]):
        RNNSeq2Seq.forward = fwd[k]
        t0 = time.perf_counter(); training_step(models[k], opts[k], b, False); dt = time.perf_counter() - t0
        if i >= 5: secs[k] += dt
    if i >= 5: toks_n += int(b.num_tgt_tokens)
for k in secs: print(k, round(toks_n / secs[k]), "tok/s")
print("ratio", secs["eager"] / secs["hoisted"])
