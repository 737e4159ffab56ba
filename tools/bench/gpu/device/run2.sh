#!/bin/bash
# Device run 2: the launch-window fix seen on the GPU host, then the probe
# overhead A/B (off / scheduler policy / 50 ms windows / full), in one process.
# Paths here are the device run's own folders, without spaces.
# shellcheck disable=SC2086
set -u
D=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
. "$D/common.sh" r2 run2
ts "env"; date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
ldd $B | grep -q "not found" && export LD_LIBRARY_PATH=$D/lib
$B --version

ts "1. scheduler policy, default config, on a fresh eager loop: window spans"
$B -v trace --probe-policy scheduler --duration 40 --csv $R/sched.csv --json $R/sched.json >$R/sched.out 2>$R/sched.err &
TR=$!
sleep 2
python3 $W/decode_eager.py --duration 22 >$R/eager_sched.jsonl
kill -INT $TR; wait $TR
grep -E "window|probing" $R/sched.err | grep -v libbpf
head -12 $R/sched.out
python3 $W/window_spans.py $R/sched.csv $R/eager_sched.jsonl
python3 $W/detect_latency.py $R/sched.json $R/eager_sched.jsonl

ts "2. A/B: off / sched / sched-w50 / full, 10 s phases, 6 rounds"
python3 $W/ab_overhead.py --bin $B --out $R/ab --rounds 6 --phase 10 \
    --modes off,sched,off,sched-w50,off,full -- python3 $W/decode_eager.py
ts "pack"
gzip -c $R/sched.csv > $R/sched.csv.gz
tar czf $OUT/r2.tgz -C /tmp --exclude r2/sched.csv r2
ls -la $OUT
ts "done"
