#!/usr/bin/env bash
# second call: trainer_steps (side by side), then the dropout-0.3 variant trained 2 min and evaluated with stacks
out=$1
exec > >(tee -a "$out/log2.txt") 2>&1
date -u +%FT%TZ
timeout -k 5 100 python3 benchmarks/trainer_steps.py configs/gpu/bible-transformer-base.toml --device cuda \
    --first 80 --block 25 --rounds 4 --json "$out/trainer_steps.json"; echo "trainer_steps exit $?"
run=runs/gpu/variant-2min
timeout -k 5 170 python3 -m attnlab.cli train configs/gpu/bible-transformer-base.toml --out $run \
    --set train.progress=false --set train.max_minutes=2 --set model.transformer.dropout=0.3; echo "train exit $?"
cp $run/metrics.jsonl "$out/metrics_variant2.jsonl"
t0=$SECONDS
timeout -k 5 60 python3 -c "
import faulthandler, sys, runpy
faulthandler.dump_traceback_later(25, repeat=True)
sys.argv = ['attnlab', 'evaluate', '$run', '--split', 'test', '--json']
runpy.run_module('attnlab.cli', run_name='__main__')" > "$out/eval_test_variant2.json"; echo "evaluate exit $? after $((SECONDS - t0))s"
