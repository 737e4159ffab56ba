#!/bin/bash
# Device run 1: environment, exact counts (full policy) vs torch.profiler,
# scheduler-policy detection, and an A/B pilot. Results under $OUT.
# Paths here are the device run's own folders, without spaces.
# shellcheck disable=SC2086
set -u
D=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
. "$D/common.sh" r1 run1
ts "env"
date -u; uname -r; nproc; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch,triton;print('torch',torch.__version__,'cuda',torch.version.cuda,'triton',triton.__version__)"
ldd $B | grep -E "not found" && export LD_LIBRARY_PATH=$D/lib
ldd $B | grep -E "elf|libz|not found"
ls -l /usr/local/nvidia/lib64/libcuda.so* ; python3 -c "import nvidia,glob;print(glob.glob(nvidia.__path__[0]+'/*/lib/libcudart*'))"
$B --version

ts "1. full policy: one trace over eager, triton, graph"
$B trace --duration 900 --csv $R/full.csv --json $R/full.json >$R/full.out 2>$R/full.err &
TR=$!
sleep 2
python3 $W/decode_eager.py --profile 5 --duration 8 >$R/eager_full.jsonl
python3 $W/triton_loop.py --profile 5 --duration 6 >$R/triton_full.jsonl
python3 $W/graph_replay.py --profile 5 --duration 6 >$R/graph_full.jsonl
kill -INT $TR; wait $TR; echo "trace rc=$?"
tail -5 $R/full.err; cat $R/full.out
cat $R/*_full.jsonl
ts "windows"
python3 $W/trace_window.py $R/full.csv $R/eager_full.jsonl $R/triton_full.jsonl $R/graph_full.jsonl | tee $R/windows.jsonl
python3 $W/detect_latency.py $R/full.json $R/eager_full.jsonl $R/triton_full.jsonl $R/graph_full.jsonl
ls -la $R/full.csv

ts "2. scheduler policy: primer, then eager, triton, graph"
$B trace --probe-policy scheduler --duration 900 --csv $R/sched.csv --json $R/sched.json >$R/sched.out 2>$R/sched.err &
TR=$!
sleep 2
python3 $W/primer.py 1 >$R/primer.jsonl
sleep 1
python3 $W/decode_eager.py --duration 4 >$R/eager_sched.jsonl
python3 $W/triton_loop.py --duration 4 >$R/triton_sched.jsonl
python3 $W/graph_replay.py --duration 4 >$R/graph_sched.jsonl
kill -INT $TR; wait $TR; echo "trace rc=$?"
tail -8 $R/sched.err; cat $R/sched.out
python3 $W/detect_latency.py $R/sched.json $R/primer.jsonl $R/eager_sched.jsonl $R/triton_sched.jsonl $R/graph_sched.jsonl | tee $R/detect.jsonl

ts "3. A/B pilot: off / sched / full, 10 s phases"
python3 $W/ab_overhead.py --bin $B --out $R/ab --rounds 2 --phase 10 --modes off,sched,full -- python3 $W/decode_eager.py
ts "pack"
head -n 20000 $R/full.csv > $R/full_head.csv
gzip -c $R/sched.csv > $R/sched.csv.gz
tar czf $OUT/r1.tgz -C /tmp --exclude r1/full.csv --exclude r1/sched.csv r1
ls -la $OUT
ts "done"
