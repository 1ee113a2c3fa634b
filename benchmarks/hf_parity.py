#!/usr/bin/env python
"""A trained Transformer run against its Hugging Face export, on every verse of a split (issue 38): greedy outputs,
beam-5 BLEU and teacher-forced log-probabilities of the reference targets, attnlab and `transformers` side by side.

    python benchmarks/hf_parity.py RUN_DIR [--split test] [--json OUT] [--hyps DIR] [--hf DIR]

With --hf DIR the run is compared with that folder (the import direction: RUN_DIR made by `attnlab import DIR`).
Otherwise the run is exported with attnlab's own export (`attnlab export RUN --to huggingface`, RUN/huggingface-best) and
loaded with `AutoModelForSeq2SeqLM` and `AutoTokenizer` only. attnlab decodes as `attnlab translate` does (the run's
decode section, batches of 64 sorted by length, fp32). `transformers` gets the same batches (right-padded, with
their attention mask) and attnlab's length limit, floor(1.5 * source tokens) + 10: generate() takes one
max_new_tokens per call, the batch's largest, and each greedy row is cut at its own sentence's limit, which is what
a search with that limit gives (greedy never looks ahead). A sample is also decoded one sentence at a time, to show
that batching and padding change nothing.

Beam search: attnlab ranks by log P / ((5 + |Y|) / 6)^alpha (GNMT), `transformers` by log P / |Y|^alpha (|Y| counts
the EOS in both). No alpha makes the two equal; the export is scored with the run's alpha and early_stopping="never"
(the bound at the limit, as attnlab's), and with --alpha0 both also with alpha = 0, where the two searches are the
same algorithm. A beam batch's limit is its largest sentence's: `limit_exceeded` counts the outputs longer than their
own sentence's limit.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
import time
import warnings
from pathlib import Path

import sacrebleu
import torch
import torch.nn.functional as F
import transformers

from attnlab.core.metrics import corpus_scores
from attnlab.data.batching import pad_sequences
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from attnlab.decode.search import max_output_length
from attnlab.decode.translate import Translator
from attnlab.families.translation import split_pairs
from attnlab.interop.huggingface import LOAD_LINES, huggingface_dir
from attnlab.runs.workflow import export_run, load_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit, machine, write_json  # noqa: E402


def attnlab_outputs(translator: Translator, sentences: list[str], beam: int) -> tuple[list[list[int]], list[str]]:
    """(ids, texts): each sentence's output ids (EOS included when the search finished it) and text."""
    tgt = translator.tokenizers.tgt
    piece_id = {tgt.id_to_piece(i): i for i in range(tgt.vocab_size)}
    out = [t[0] for t in translator.translate(sentences, beam_size=beam)]
    return [[piece_id[p] for p in t.tgt_tokens] for t in out], [t.text for t in out]


def strip(row: list[int]) -> list[int]:
    """A generate() row without its decoder start, up to its first EOS (kept)."""
    row = row[1:]
    return row[:row.index(EOS_ID) + 1] if EOS_ID in row else row


@torch.no_grad()
def hf_generate(model, batches: list[list[int]], src_ids: list[list[int]], limits: list[int], **kwargs
                ) -> dict[int, list[int]]:
    """{sentence: output ids}: generate() on each batch of sentence indices (right-padded, the batch's largest
    limit as max_new_tokens)."""
    out = {}
    for batch in batches:
        x = pad_sequences([src_ids[i] for i in batch])  # (B, S), right-padded with PAD (Marian's pad too)
        rows = model.generate(input_ids=x, attention_mask=(x != PAD_ID).long(), do_sample=False,
                              max_new_tokens=max(limits[i] for i in batch), **kwargs).tolist()
        out.update({i: strip(row) for i, row in zip(batch, rows)})
    return out


def batches_by_length(src_ids: list[list[int]], size: int) -> list[list[int]]:
    """Sentence indices sorted by source length, `size` a batch (as attnlab's Translator batches them)."""
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    return [order[k:k + size] for k in range(0, len(order), size)]


@torch.no_grad()
def teacher_forced(run, hf, src_ids: list[list[int]], tgt_ids: list[list[int]], batch: int) -> dict:
    """Per-token log-probabilities of the reference targets (ids + EOS) under both models: max and mean |diff|,
    and of the sentence sums."""
    diffs, sums = [], []
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    for k in range(0, len(order), batch):
        chunk = order[k:k + batch]
        x = pad_sequences([src_ids[i] for i in chunk])  # (B, S)
        lengths = torch.tensor([len(src_ids[i]) for i in chunk])  # (B,)
        y_in = pad_sequences([[BOS_ID] + tgt_ids[i] for i in chunk])  # (B, T)
        y_out = pad_sequences([tgt_ids[i] + [EOS_ID] for i in chunk])  # (B, T)
        real = y_out != PAD_ID  # (B, T)
        ours = F.log_softmax(run.model(x, lengths, y_in).float(), -1).gather(-1, y_out[..., None])[..., 0]  # (B, T)
        theirs = F.log_softmax(hf(input_ids=x, attention_mask=(x != PAD_ID).long(), decoder_input_ids=y_in
                                  ).logits.float(), -1).gather(-1, y_out[..., None])[..., 0]  # (B, T)
        d = (ours - theirs).abs()
        diffs.append(d[real].double())
        sums.append((ours.double() * real).sum(1) - (theirs.double() * real).sum(1))
    d, s = torch.cat(diffs), torch.cat(sums).abs()
    return {"tokens": d.numel(), "max_abs_diff_per_token": float(d.max()), "mean_abs_diff_per_token": float(d.mean()),
            "tokens_over_1e-4": int((d > 1e-4).sum()), "max_abs_diff_per_sentence_sum": float(s.max())}


def first_difference(a: list[int], b: list[int]) -> int:
    return next((t for t, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def pipeline_check(hf, tok) -> str:
    try:
        transformers.pipeline("translation", model=hf, tokenizer=tok)
    except Exception as e:  # transformers 5 dropped the text2text pipelines
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return "available"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--split", default="test")
    ap.add_argument("--checkpoint", default="best")
    ap.add_argument("--batch", type=int, default=64, help="sentences per generate() call")
    ap.add_argument("--sample", type=int, default=32, help="sentences also decoded one at a time")
    ap.add_argument("--max-sentences", type=int, default=0, help="the split's first N only (0: all)")
    ap.add_argument("--alpha0", action="store_true", help="beam 5 also with alpha = 0 on both sides")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-alone", action="store_true",
                    help="transformers' beam search one sentence at a time, each at its own length limit (batched, "
                         "a batch shares its longest sentence's limit)")
    ap.add_argument("--hf", type=Path, metavar="DIR",
                    help="compare with this Hugging Face folder instead of the run's own export (the import "
                         "direction: RUN_DIR made by `attnlab import DIR`, whose ids are DIR's)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--hyps", type=Path, help="a folder for the hypotheses of every search, a line per verse")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # "Both max_new_tokens and max_length (the export's) set", per call
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    folder = args.hf or export_run(args.run_dir, huggingface_dir(args.run_dir, args.checkpoint), "float32",
                                   args.checkpoint, to="huggingface")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MarianTokenizer: "Recommended: pip install sacremoses" (never used)
        tok = transformers.AutoTokenizer.from_pretrained(folder)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    seconds["export_and_load"] = time.perf_counter() - t0
    run = load_run(args.run_dir, args.checkpoint, "cpu", ability="translate")
    decode = run.cfg.decode
    translator = Translator(run.model, run.tokenizers, decode, "cpu")
    pairs = split_pairs(run.cfg, args.split, run.tokenizers, args.max_sentences)
    src, refs = [p.src for p in pairs], [p.tgt for p in pairs]
    n = len(src)

    ours_src = translator.encode_source(src)
    hf_src = tok(src).input_ids
    ours_tgt = [run.tokenizers.tgt.encode(r) for r in refs]
    hf_tgt = [ids[:-1] for ids in tok(text_target=refs).input_ids]  # without its EOS
    limits = max_output_length(torch.tensor([len(x) for x in hf_src]), decode.max_len_ratio,
                               decode.max_len_offset).tolist()
    batches = batches_by_length(hf_src, args.batch)
    result: dict = {
        "run": str(args.run_dir), "checkpoint": args.checkpoint, "export": str(folder),
        "hf_class": type(hf).__name__, "split": args.split, "sentences": n,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), "commit": commit(),
        "machine": machine(), "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                           "sacrebleu": sacrebleu.__version__},
        "tokenizer": {"source_ids_equal": sum(a == b for a, b in zip(ours_src, hf_src)),
                      "target_ids_equal": sum(a == b for a, b in zip(ours_tgt, hf_tgt))},
        "length_limit": f"max_new_tokens = floor({decode.max_len_ratio} * source tokens incl. EOS) + "
                        f"{decode.max_len_offset}, per sentence (attnlab's)",
        "hf_batches": {"batches": len(batches), "size": args.batch},
        "pipeline_translation": pipeline_check(hf, tok), "pipeline_equivalent": list(LOAD_LINES)}
    print(f"{n} sentences, {len(batches)} generate() batches; tokenizer {result['tokenizer']}", file=sys.stderr)

    # (a) greedy
    t0 = time.perf_counter()
    ours_ids, ours_text = attnlab_outputs(translator, src, 1)
    seconds["attnlab_greedy"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = hf_generate(hf, batches, hf_src, limits, num_beams=1)
    seconds["hf_greedy"] = time.perf_counter() - t0
    theirs = {i: ids[:limits[i]] for i, ids in theirs.items()}  # each at its own limit
    theirs_ids = [theirs[i] for i in range(n)]
    theirs_text = tok.batch_decode(theirs_ids, skip_special_tokens=True)
    differ = [i for i in range(n) if ours_ids[i] != theirs_ids[i]]
    unk = [i for i in range(n) if 3 in ours_ids[i]]
    result["greedy"] = {
        "identical_token_sequences": n - len(differ), "identical_texts": sum(a == b for a, b in zip(ours_text,
                                                                                                   theirs_text)),
        "identical_texts_after_strip": sum(a.strip() == b.strip() for a, b in zip(ours_text, theirs_text)),
        "outputs_with_unk": len(unk), "outputs_cut_at_limit": sum(ids[-1:] != [EOS_ID] for ids in ours_ids),
        "bleu_attnlab": round(corpus_scores(ours_text, refs).bleu, 2),
        "bleu_hf": round(corpus_scores(theirs_text, refs).bleu, 2),
        "differences": [{"sentence": i, "position": first_difference(ours_ids[i], theirs_ids[i]),
                         "attnlab": ours_ids[i], "hf": theirs_ids[i]} for i in differ[:20]]}
    text_differ = [i for i in range(n) if ours_text[i] != theirs_text[i]]
    result["greedy"]["text_differences"] = [{"sentence": i, "attnlab": ours_text[i], "hf": theirs_text[i]}
                                            for i in text_differ[:10]]
    print("greedy", {k: v for k, v in result["greedy"].items() if "differences" not in k}, file=sys.stderr)

    # batching: a sample alone, and in one padded batch of mixed lengths
    t0 = time.perf_counter()
    sample = sorted(range(n), key=lambda i: len(hf_src[i]))[:: max(1, n // args.sample)][:args.sample]
    alone = hf_generate(hf, [[i] for i in sample], hf_src, limits, num_beams=1)
    result["batching_check"] = {
        "sample": len(sample), "source_lengths": [len(hf_src[sample[0]]), len(hf_src[sample[-1]])],
        "alone_equals_batched": sum(alone[i] == theirs[i] for i in sample)}
    seconds["batching_check"] = time.perf_counter() - t0
    print("batching", result["batching_check"], file=sys.stderr)

    # (c) teacher-forced log-probabilities of the references
    t0 = time.perf_counter()
    result["teacher_forced"] = teacher_forced(run, hf, ours_src, ours_tgt, args.batch)
    seconds["teacher_forced"] = time.perf_counter() - t0
    print("teacher forced", result["teacher_forced"], file=sys.stderr)

    # (b) beam 5
    hyps = {"attnlab_beam1": ours_text, "hf_beam1": theirs_text}
    settings = [(decode.length_penalty, decode.length_penalty)] + ([(0.0, 0.0)] if args.alpha0 else [])
    result["beam5"] = []
    for ours_alpha, hf_alpha in settings:
        t0 = time.perf_counter()
        beam_translator = Translator(run.model, run.tokenizers, dataclasses.replace(decode, length_penalty=ours_alpha),
                                     "cpu")
        ours5 = attnlab_outputs(beam_translator, src, 5)[1]
        t1 = time.perf_counter()
        theirs5 = hf_generate(hf, [[i] for i in range(n)] if args.beam_alone else batches, hf_src, limits,
                              num_beams=5, length_penalty=hf_alpha, early_stopping="never")
        t2 = time.perf_counter()
        theirs5_text = tok.batch_decode([theirs5[i] for i in range(n)], skip_special_tokens=True)
        a, b = corpus_scores(ours5, refs), corpus_scores(theirs5_text, refs)
        row = {"hf_one_sentence_per_call": args.beam_alone, "attnlab_alpha_gnmt": ours_alpha, "hf_length_penalty": hf_alpha, "hf_early_stopping": "never",
               "bleu_attnlab": round(a.bleu, 2), "bleu_hf": round(b.bleu, 2),
               "bleu_difference": round(b.bleu - a.bleu, 2),
               "chrf_attnlab": round(a.chrf, 2), "chrf_hf": round(b.chrf, 2),
               "identical_texts": sum(x == y for x, y in zip(ours5, theirs5_text)),
               "identical_texts_after_strip": sum(x.strip() == y.strip() for x, y in zip(ours5, theirs5_text)),
               "limit_exceeded": sum(len(theirs5[i]) > limits[i] for i in range(n)), "bleu_signature": a.bleu_signature,
               "seconds_attnlab": round(t1 - t0, 1), "seconds_hf": round(t2 - t1, 1)}
        result["beam5"].append(row)
        hyps[f"attnlab_beam5_alpha{ours_alpha:g}"], hyps[f"hf_beam5_alpha{hf_alpha:g}"] = ours5, theirs5_text
        print("beam 5", row, file=sys.stderr)
    result["seconds"] = {k: round(v, 1) for k, v in seconds.items()}

    if args.hyps is not None:
        args.hyps.mkdir(parents=True, exist_ok=True)
        for name, lines in hyps.items():
            (args.hyps / f"{name}.txt").write_text("".join(" ".join(h.splitlines()) + "\n" for h in lines))
    print(write_json(args.json, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
