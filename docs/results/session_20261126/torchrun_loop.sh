#!/bin/bash
# repeat the torchrun test's command N times; report the duration of each
cd /work/main
.venv/bin/python - <<'PY'
import sys; sys.path.insert(0, "tests")
from conftest import make_pairs
from pathlib import Path
d = Path("/tmp/hang/tiny"); d.mkdir(exist_ok=True)
for name, n, seed in (("train", 1500, 0), ("dev", 40, 1), ("test", 40, 2)):
    (d / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in make_pairs(n, seed)), encoding="utf-8")
PY
cat > /tmp/hang/ddp.toml <<T
[data]
corpus = "files"
train = ["/tmp/hang/tiny/train.tsv"]
dev = ["/tmp/hang/tiny/dev.tsv"]
[tokenizer]
kind = "char"
[model.rnn]
emb_dim = 16
hidden_dim = 32
dropout = 0.0
[train]
max_steps = 6
max_tokens = 600
eval_every = 3
eval_max_sentences = 5
num_threads = 1
progress = false
T
for i in $(seq 1 $1); do
  rm -rf /tmp/hang/out
  s=$(date +%s.%N)
  timeout 120 .venv/bin/python -m torch.distributed.run --standalone --nproc_per_node 2 -m attnlab.cli train /tmp/hang/ddp.toml --out /tmp/hang/out > /tmp/hang/out.$i.log 2>&1
  rc=$?
  e=$(date +%s.%N)
  echo "run $i rc=$rc $(echo "$e - $s" | bc) s"
done
