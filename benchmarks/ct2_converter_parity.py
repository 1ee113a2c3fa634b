#!/usr/bin/env python
"""A run's Hugging Face export through CTranslate2's own converter (issue 47): greedy output of the converted model
against `attnlab translate RUN --beam 1`, on every verse of a split; and export, import, export of the same run,
file for file.

    python benchmarks/ct2_converter_parity.py [RUN] [--split test] [--work DIR] [--json OUT]

RUN (default pretrained:transformer, a pre-norm run, exported as Pegasus) is exported with
`attnlab export RUN --to huggingface`; the folder is converted by `ct2-transformers-converter` and decoded with
`ctranslate2.Translator`, its source pieces made by `transformers.AutoTokenizer` from the same folder and its output
joined by that tokenizer: attnlab's code is not used on that side. The converted model decodes greedily with
attnlab's length limit (floor(1.5 * source tokens) + 10, the EOS counted) and the ids the export's
generation_config.json suppresses. attnlab's side is the command line, `attnlab translate RUN FILE --beam 1`.
The round trip: `attnlab import` of the export, then `attnlab export` of that run; every file of the two exports is
compared byte for byte. Two files say where the export came from and differ by design: README.md (the training
budget, from the run's log, which an import has not) and attnlab.json (the checkpoint's and tokenizer's SHA-256).
MarianTokenizer strips the text it joins, as attnlab's `output_text` does (an output cut at the length limit can
end in a space); the script counts identical outputs, and outputs identical but for surrounding space.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ctranslate2
import transformers

from attnlab.families.translation import split_pairs
from attnlab.runs.shipped import run_path
from attnlab.runs.workflow import load_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit, machine, write_json  # noqa: E402


def attnlab(*args: str) -> str:
    """The attnlab command line (the one in this interpreter's environment); its stdout."""
    done = subprocess.run([sys.executable, "-m", "attnlab", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"attnlab {' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return done.stdout


def converted_greedy(hf: Path, ct2: Path, sources: list[str], threads: int) -> list[str]:
    """Greedy translations by the converter's model, with the export's own tokenizer and suppressed ids."""
    tok = transformers.AutoTokenizer.from_pretrained(str(hf))
    gen = json.loads((hf / "generation_config.json").read_text())
    suppressed = [[p] for p in tok.convert_ids_to_tokens(gen.get("suppress_tokens") or [])]
    translator = ctranslate2.Translator(str(ct2), device="cpu", intra_threads=threads)
    pieces = [tok.convert_ids_to_tokens(tok(s).input_ids) for s in sources]
    order = sorted(range(len(sources)), key=lambda i: len(pieces[i]))
    out: list[str] = [""] * len(sources)
    for start in range(0, len(order), 64):
        chunk = order[start:start + 64]
        limits = [int(1.5 * len(pieces[i])) + 10 for i in chunk]
        results = translator.translate_batch([pieces[i] for i in chunk], beam_size=1, max_decoding_length=max(limits),
                                             suppress_sequences=suppressed or None)
        for i, limit, res in zip(chunk, limits, results):
            tokens = res.hypotheses[0]
            tokens = tokens if len(tokens) + 1 <= limit else tokens[:limit]  # greedy never looks ahead: its own limit
            out[i] = tok.convert_tokens_to_string(tokens)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", default="pretrained:transformer")
    ap.add_argument("--split", default="test")
    ap.add_argument("--work", type=Path, help="folder for the exports (default: a temporary one)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="ct2-converter-"))
    work.mkdir(parents=True, exist_ok=True)
    hf, ct2, back, hf2 = work / "hf", work / "ct2", work / "run", work / "hf-again"
    for d in (hf, back, hf2):
        if d.exists():
            raise SystemExit(f"{d}: exists; give an empty --work")
    run = load_run(run_path(args.run), "best", "cpu", ability="translate")
    sources = [p.src for p in split_pairs(run.cfg, args.split, run.tokenizers)]
    (work / "sources.txt").write_text("".join(s + "\n" for s in sources), encoding="utf-8")

    attnlab("export", args.run, "--to", "huggingface", "--out", str(hf))
    t0 = time.perf_counter()
    converter = Path(sys.executable).with_name("ct2-transformers-converter")  # installed beside this Python
    conv = subprocess.run([str(converter), "--model", str(hf), "--output_dir", str(ct2), "--force"],
                          capture_output=True, text=True)
    result: dict = {"run": args.run, "split": args.split, "sentences": len(sources),
                    "converter": {"exit": conv.returncode, "seconds": round(time.perf_counter() - t0, 1),
                                  "stderr_tail": conv.stderr.strip().splitlines()[-3:]},
                    "machine": machine("ctranslate2", "transformers"), "commit": commit(),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if conv.returncode == 0:
        result["converted_config"] = json.loads((ct2 / "config.json").read_text())
        theirs = converted_greedy(hf, ct2, sources, args.threads)
        ours = attnlab("translate", args.run, str(work / "sources.txt"), "--beam", "1").splitlines()
        same = [a == b for a, b in zip(ours, theirs)]
        stripped = [a.strip() == b for a, b in zip(ours, theirs)]  # MarianTokenizer strips the joined text
        result["greedy"] = {"attnlab_lines": len(ours), "converted_lines": len(theirs), "identical": sum(same),
                            "identical_but_for_surrounding_space": sum(stripped),
                            "differences": [{"sentence": i, "src": sources[i], "attnlab": ours[i],
                                             "ct2_converter": theirs[i]}
                                            for i, s in enumerate(same) if not s][:10]}
        print(f"greedy: {sum(same)} of {len(sources)} identical, {sum(stripped)} but for surrounding space",
              flush=True)
    attnlab("import", str(hf), "--out", str(back))
    attnlab("export", str(back), "--to", "huggingface", "--out", str(hf2))
    files = sorted(p.name for p in hf.iterdir() if p.is_file())
    result["round_trip"] = {name: (hf / name).read_bytes() == (hf2 / name).read_bytes()
                            if (hf2 / name).is_file() else "missing" for name in files}
    result["round_trip"]["files_only_in_second"] = sorted({p.name for p in hf2.iterdir()} - set(files))
    print("round trip:", result["round_trip"], flush=True)
    print(write_json(args.json, result))
    ok = conv.returncode == 0 and result["greedy"]["identical_but_for_surrounding_space"] == len(sources)
    provenance = ("README.md", "attnlab.json", "files_only_in_second")
    return 0 if ok and all(v is True for k, v in result["round_trip"].items() if k not in provenance) else 1


if __name__ == "__main__":
    sys.exit(main())
