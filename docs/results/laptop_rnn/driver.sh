#!/usr/bin/env bash
cd /tmp/src-R
export PYTHONPATH=/tmp/src-R/src
A=/work/main/.venv/bin/attnlab
OUT=/work/main/runs/laptop
(while true; do printf '{"time": "%s", "load1": %s, "training": "%s"}\n' "$(date -u +%FT%TZ)" "$(cut -d' ' -f1 /proc/loadavg)" "$(cat $OUT/.training 2>/dev/null)" >> $OUT/load.jsonl; sleep 60; done) &
LOADER=$!
train() { $A train configs/bible-rnn-$1.toml --out $OUT/$2 --set train.max_steps=900 --set train.num_threads=1 "${@:3}" > $OUT/$2.log 2>&1; }
echo "bahdanau noattn" > $OUT/.training
train bahdanau bahdanau & p1=$!
train noattn noattn & p2=$!
wait $p1 $p2
echo "luong noattn_2way" > $OUT/.training
train luong luong & p1=$!
train noattn noattn_2way --set model.rnn.bidirectional=true & p2=$!
wait $p1 $p2
echo "evaluate" > $OUT/.training
for k in bahdanau noattn; do OMP_NUM_THREADS=1 $A evaluate $OUT/$k --split test --beam 5 > $OUT/$k.eval.log 2>&1 & done; wait
for k in luong noattn_2way; do OMP_NUM_THREADS=1 $A evaluate $OUT/$k --split test --beam 5 > $OUT/$k.eval.log 2>&1 & done; wait
kill $LOADER; rm -f $OUT/.training; echo done > $OUT/DONE
