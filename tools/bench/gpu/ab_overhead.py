#!/usr/bin/env python3
"""Probe overhead on a running workload, A/B inside one process.

  ab_overhead.py --bin scx_express --out DIR --rounds 10 --phase 20 \\
      --modes off,sched -- python3 tools/bench/gpu/decode_eager.py

Starts the workload once (with --duration long enough and --iter-times),
waits for its timed loop, then runs phases of --phase seconds: in `off`
nothing is attached; in any other mode `scx_express trace` runs for the
phase with that mode's flags (below). Each round runs the modes in order
(a mode may repeat, e.g. off,sched,off,full), every other round in reverse,
so drift cancels. Throughput of a phase = iterations that ended inside it /
its length; a traced phase runs from its first attached probe to the end
of tracing. Prints per-phase rows and a JSON summary: per mode the median
rate, its change from `off`, the change of each phase against the mean of
the nearest `off` phases before and after it, and probe hits per iteration
read from the trace's JSON report.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

MODES = {
    "off": None,
    # Exactly the scheduler's probes: sync/copy/marker always, launch windows.
    "sched": ["--probe-policy", "scheduler", "--no-events"],
    # The same, plus events, sched_switch and IRQ tracing.
    "sched-events": ["--probe-policy", "scheduler"],
    # Every launch entry point all the time.
    "full": ["--probe-policy", "full", "--no-events"],
}
# "sched-wN": the scheduler's probes with [classify] launch_window_ms = N.


def mode_args(m, out):
    if m.startswith("sched-w"):
        ms = int(m[len("sched-w"):])
        cfg = os.path.join(out, f"window_{ms}.toml")
        with open(cfg, "w") as f:
            f.write(f"[classify]\nlaunch_window_ms = {ms}\n")
        return ["--config", cfg] + MODES["sched"]
    return MODES[m]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--phase", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--modes", default="off,sched")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    modes = a.modes.split(",")
    for m in modes:
        if m not in MODES and not m.startswith("sched-w"):
            sys.exit(f"unknown mode {m}")
    os.makedirs(a.out, exist_ok=True)
    times = os.path.join(a.out, "iter_times.txt")
    total = a.settle + a.rounds * len(modes) * (a.phase + 2) + 60
    wl = subprocess.Popen(cmd + ["--duration", str(total), "--iter-times", times],
                          stdout=subprocess.PIPE, text=True)
    lines = []
    started = threading.Event()

    def reader():
        for line in wl.stdout:
            lines.append(line)
            sys.stdout.write("workload: " + line)
            sys.stdout.flush()
            if '"timed_start"' in line:
                started.set()

    threading.Thread(target=reader, daemon=True).start()
    if not started.wait(600):
        sys.exit("workload never started its timed loop")
    tid = next(json.loads(x)["tid"] for x in lines if '"start"' in x)
    time.sleep(a.settle)

    phases = []
    for r in range(a.rounds):
        order = modes if r % 2 == 0 else modes[::-1]
        for m in order:
            t0 = time.monotonic_ns()
            rep = None
            if m == "off":
                time.sleep(a.phase)
            else:
                rep = os.path.join(a.out, f"trace_{r}_{m}.json")
                with open(os.path.join(a.out, f"trace_{r}_{m}.log"), "w") as log:
                    rc = subprocess.run([a.bin, "trace", "--duration", str(a.phase),
                                         "--json", rep] + mode_args(m, a.out),
                                        stdout=log, stderr=subprocess.STDOUT).returncode
                if rc != 0:
                    print(f"trace failed (rc {rc}) in round {r} mode {m}", flush=True)
                    rep = None
            t1 = time.monotonic_ns()
            phases.append({"round": r, "mode": m, "t0_ns": t0, "t1_ns": t1, "report": rep})
            print(f"phase round={r} mode={m} secs={(t1 - t0) / 1e9:.2f}", flush=True)

    wl.terminate()
    wl.wait(120)
    ends = [int(x) for x in open(times)]
    for p in phases:
        rep = json.load(open(p["report"])) if p["report"] else None
        # A traced phase counts from its first probe to the end of tracing.
        if rep and rep.get("probes_attached_ns"):
            p["t0_ns"], p["t1_ns"] = rep["probes_attached_ns"], rep["end_ns"]
        n = sum(1 for t in ends if p["t0_ns"] < t <= p["t1_ns"])
        p["iterations"] = n
        p["rate"] = n / ((p["t1_ns"] - p["t0_ns"]) / 1e9)
        if rep:
            row = next((t for t in rep["threads"] if t["tid"] == tid), None)
            hits = (row["launch_hits"] + row["sync_hits"]) if row else 0
            p["hits"] = hits
            p["hits_per_iter"] = hits / n if n else None
            p["launch_windows"] = rep["launch_windows"]
        print(json.dumps({k: v for k, v in p.items() if k != "report"}), flush=True)

    off = [p for p in phases if p["mode"] == "off"]
    summary = {"tid": tid, "phase_s": a.phase, "rounds": a.rounds, "modes": {}}
    off_med = statistics.median(p["rate"] for p in off) if off else None
    for m in dict.fromkeys(modes):
        ps = [p for p in phases if p["mode"] == m]
        rates = [p["rate"] for p in ps]
        s = {"phases": len(ps), "median_rate": statistics.median(rates),
             "mean_rate": statistics.mean(rates),
             "min_rate": min(rates), "max_rate": max(rates)}
        if m != "off" and off_med:
            s["median_change_pct"] = 100 * (s["median_rate"] / off_med - 1)
            # Each phase against the mean of the nearest off phase before
            # and after it.
            rel = []
            for p in ps:
                i = phases.index(p)
                before = [q for q in phases[:i] if q["mode"] == "off"][-1:]
                after = [q for q in phases[i + 1:] if q["mode"] == "off"][:1]
                near = [q["rate"] for q in before + after]
                if near:
                    rel.append(100 * (p["rate"] / statistics.mean(near) - 1))
            if rel:
                s["paired_change_pct"] = {
                    "n": len(rel), "mean": statistics.mean(rel),
                    "median": statistics.median(rel),
                    "ci95": 1.96 * statistics.stdev(rel) / len(rel) ** 0.5 if len(rel) > 1 else None,
                    "values": [round(x, 2) for x in rel]}
            hp = [p["hits_per_iter"] for p in ps if p.get("hits_per_iter") is not None]
            if hp:
                s["hits_per_iter_median"] = statistics.median(hp)
        summary["modes"][m] = s
    print("SUMMARY " + json.dumps(summary), flush=True)
    json.dump({"summary": summary, "phases": phases},
              open(os.path.join(a.out, "ab.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
