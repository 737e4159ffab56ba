#!/bin/bash
# Device run 3: per-hit uprobe cost (microbenchmark), the cost of each launch
# window measured locally on a running eager loop (default 200 ms and 50 ms
# windows), and more off/sched A/B rounds.
# Paths here are the device run's own folders, without spaces.
# shellcheck disable=SC2086
set -u
D=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
. "$D/common.sh" r3 run3
ts "env"; date -u; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ldd $B | grep -q "not found" && export LD_LIBRARY_PATH=$D/lib

ts "1. per-hit cost: probe_cost with a marker probe, without and with events"
$W/probe_cost 42 >$R/pc.jsonl &
PC=$!
sleep 5
$B trace --config $W/marker.toml --no-events --duration 12 --json $R/pc_ne.json >/dev/null 2>&1
sleep 4
$B trace --config $W/marker.toml --duration 12 --json $R/pc_ev.json >/dev/null 2>&1
wait $PC
python3 $W/probe_cost_report.py $R/pc.jsonl no_events=$R/pc_ne.json events=$R/pc_ev.json | tee $R/pc_report.json

ts "2. window cost on a running eager loop"
python3 $W/decode_eager.py --duration 600 --iter-times $R/it.txt >$R/eager.jsonl &
WL=$!
until grep -q timed_start $R/eager.jsonl; do sleep 0.5; done
sleep 3
$B trace --probe-policy scheduler --no-events --duration 125 --json $R/w200.json >$R/w200.out; head -8 $R/w200.out
sleep 3
$B trace --probe-policy scheduler --no-events --duration 65 --config $W/w50.toml --json $R/w50.json >$R/w50.out; head -8 $R/w50.out
sleep 20
kill -TERM $WL; wait $WL
tail -1 $R/eager.jsonl
python3 $W/window_excess.py $R/it.txt $R/w200.json $R/w50.json | tee $R/window_excess.txt
python3 - $R <<'PY'
import json, sys
r = sys.argv[1]
ends = [int(x) for x in open(f"{r}/it.txt")]
tid = json.loads(open(f"{r}/eager.jsonl").readline())["tid"]
for name in ("w200", "w50"):
    rep = json.load(open(f"{r}/{name}.json"))
    a, b = rep["probes_attached_ns"], rep["end_ns"]
    n = sum(1 for t in ends if a < t <= b)
    row = next(t for t in rep["threads"] if t["tid"] == tid)
    print(json.dumps({"trace": name, "tokens": n, "tok_s": round(n / ((b - a) / 1e9), 2),
                      "launch_hits": row["launch_hits"], "sync_hits": row["sync_hits"],
                      "hits_per_token": round((row["launch_hits"] + row["sync_hits"]) / n, 1),
                      "windows": rep["launch_windows"]}))
PY

ts "3. more A/B rounds: off / sched, 10 s phases"
python3 $W/ab_overhead.py --bin $B --out $R/ab --rounds 6 --phase 10 --modes off,sched -- python3 $W/decode_eager.py | grep -v '^workload\|^phase'
ts "pack"
tar czf $OUT/r3.tgz -C /tmp r3
ls -la $OUT
ts "done"
