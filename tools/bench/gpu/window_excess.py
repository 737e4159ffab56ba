#!/usr/bin/env python3
"""What each launch-probe window costs a running workload, measured locally.

  window_excess.py ITER_TIMES.txt TRACE.json [TRACE.json...]

ITER_TIMES: the workload's iteration end times (tools/bench/gpu/common.py
--iter-times); TRACE.json: `scx_express trace --json` reports, with
`launch_windows_ns`. For each window [open, close], the iterations that
overlap it take longer than usual; their extra time is measured against the
median iteration time within 3 s before and after (skipping 0.3 s at each
side), so slow drifts of the host cancel. The same measure at control points
halfway between windows gives the estimator's noise floor. Prints one JSON
line per window, then a summary: mean extra time per window and, divided by
the window period, the windows' share of throughput.
"""

import bisect
import json
import statistics
import sys


def excess(ends, o, c):
    """Extra ns of the iterations overlapping [o, c] over the local median."""
    durs = [(ends[i - 1], ends[i]) for i in range(1, len(ends))]
    starts = [a for a, _ in durs]

    def span(lo, hi):
        i = bisect.bisect_left(starts, lo)
        out = []
        while i < len(durs) and durs[i][1] <= hi:
            out.append(durs[i][1] - durs[i][0])
            i += 1
        return out

    base = span(o - 3_000_000_000, o - 300_000_000) + span(c + 300_000_000, c + 3_000_000_000)
    if len(base) < 20:
        return None
    med = statistics.median(base)
    i = bisect.bisect_right(starts, o) - 1
    extra, n = 0, 0
    while 0 <= i < len(durs) and durs[i][0] < c:
        extra += durs[i][1] - durs[i][0] - med
        n += 1
        i += 1
    return extra, n, med


def main():
    ends = [int(x) for x in open(sys.argv[1])]
    for path in sys.argv[2:]:
        rep = json.load(open(path))
        wins = [w for w in rep.get("launch_windows_ns", []) if w[1] > w[0]]
        res, ctl = [], []
        for k, (o, c) in enumerate(wins):
            e = excess(ends, o, c)
            if e:
                res.append(e[0])
                print(json.dumps({"trace": path, "window": k, "open_ns": o,
                                  "len_ms": round((c - o) / 1e6, 1), "iterations": e[1],
                                  "extra_ms": round(e[0] / 1e6, 2),
                                  "local_median_ms": round(e[2] / 1e6, 2)}))
            if k + 1 < len(wins):
                mid = (o + wins[k + 1][0]) // 2
                e = excess(ends, mid, mid + (c - o))
                if e:
                    ctl.append(e[0])
        if len(wins) > 1:
            period = statistics.median(b[0] - a[0] for a, b in zip(wins, wins[1:]))
        else:
            period = None

        def summ(v):
            if not v:
                return None
            m = statistics.mean(v)
            ci = 1.96 * statistics.stdev(v) / len(v) ** 0.5 if len(v) > 1 else None
            s = {"n": len(v), "mean_extra_ms": round(m / 1e6, 2),
                 "ci95_ms": round(ci / 1e6, 2) if ci else None}
            if period:
                s["share_pct"] = round(100 * m / period, 3)
                s["share_ci95_pct"] = round(100 * ci / period, 3) if ci else None
            return s

        print("SUMMARY " + json.dumps({
            "trace": path, "windows": len(wins),
            "period_s": round(period / 1e9, 2) if period else None,
            "window_ms": round(statistics.median((c - o) / 1e6 for o, c in wins), 1) if wins else None,
            "windows_measured": summ(res), "control_points": summ(ctl)}))


if __name__ == "__main__":
    main()
