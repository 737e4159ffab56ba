#!/bin/sh
# Tenants: per-cgroup budgets inside the agent class.
#  a) A runaway busy loop marked agent in tenant "ta" (max_share 0.02: 4 ms
#     of express time per 100 ms on 2 CPUs) is held to ta's quota (ta's
#     quota denials grow), while the agent stand-in in tenant "tb" keeps
#     its express dispatches with no quota denials (neither tb's nor the
#     class's: ta's runaway spends only ta's share), and its wakeups are measured
#     (histogram and over-target count, in --stats and OpenMetrics).
#  b) A reload that gives tb no budget (burst 0, rate 0) takes effect
#     without a detach: tb's tasks are denied; restoring it brings its
#     express dispatches back.
#  c) Moving the agent's process into ta's cgroup moves it to tenant ta:
#     ps shows it, tb's wakeups stop and ta's grow.
#  d) Held CPUs count in the tenant's quota: with plain hogs on every CPU,
#     the agent and its tool server, now in ta (whose share its runaway
#     spends), get their holds refused for quota though the class's
#     max_share has room, and the time held for them stays within ta's
#     share.
# vmtest: smp=2 timeout=300 bins=target/release/scx_express files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

CG=/sys/fs/cgroup
mkdir -p "$CG/ta" "$CG/tb" || fail "cannot create cgroups"

# in_cgroup GROUP CMD...: run CMD in the background inside GROUP.
in_cgroup() {
    _g=$1
    shift
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG/$_g" "$@" &
}

# config TB_BUDGET: the scenario's config with tb's budget lines.
config() {
    cat <<TOML
[classes.agent]
max_share = 1.0
$AGENT_RULE_TOML

[[tenants]]
name = "ta"
cgroup = "/ta"
class = "agent"
rate = 1.0
max_share = 0.02

[[tenants]]
name = "tb"
cgroup = "/tb"
class = "agent"
$1
TOML
}
# tb's own bucket is ample (a whole CPU's rate): its tasks run dry only if
# one burst outlasts 100 ms, so what could deny them is a quota.
TB_BUDGET=$(printf 'burst_ms = 100\nrate = 1.0\nmax_share = 0.5')
config "$TB_BUDGET" >/tmp/t.toml
scx_express check-config /tmp/t.toml || fail "check-config rejected the tenants config"
start_scx /tmp/scx.log --config /tmp/t.toml --metrics-file /tmp/metrics.prom

in_cgroup ta /opt/w/hog --duration 90 >/tmp/hog.out 2>&1
HOG=$!
in_cgroup tb /opt/w/agent --duration 90 >/tmp/agent.out 2>&1
AGT=$!
wait_until 20 grep -q '^agent_tid=' /tmp/agent.out || fail_logs "agent did not start"
ATID=$(sed -n 's/^agent_tid=//p' /tmp/agent.out | head -n 1)
scx_express mark --tid "$HOG" --class agent || fail "cannot mark the hog"
wait_until 30 classified_as "$ATID" agent || fail_logs "the agent loop $ATID was not classified agent"
wait_until 10 sh -c "[ \"\$(scx_express ps | awk -v t=$HOG '\$1 == t { print \$9 }')\" = ta ]" ||
    fail_logs "ps does not show the hog $HOG in tenant ta"
wait_until 10 sh -c "[ \"\$(scx_express ps | awk -v t=$ATID '\$1 == t { print \$9 }')\" = tb ]" ||
    fail_logs "ps does not show the agent loop $ATID in tenant tb"
echo "ok: ps shows the hog in ta and the agent loop in tb"

# window N: snapshots /tmp/s0 and /tmp/s1, N seconds apart.
window() {
    sleep 2 # let one stats refresh pass after a change
    stats_snapshot /tmp/s0
    sleep "$1"
    stats_snapshot /tmp/s1
}
# d KEY...: increase of the sum of KEYs over the window.
d() { echo $(($(snap_sum /tmp/s1 "$@") - $(snap_sum /tmp/s0 "$@"))); }
# hist_sum FILE TENANT: the sum of the tenant's latency histogram.
hist_sum() {
    awk -v k="tenants.$2.latency_hist" '$1 == k { gsub(/[][]/, "", $2); n = split($2, v, ","); for (i = 1; i <= n; i++) s += v[i] } END { print s + 0 }' "$1"
}

# a) ta held to its quota, tb unaffected.
window 6
ta_q=$(d tenants.ta.quota) ta_x=$(d tenants.ta.express)
tb_x=$(d tenants.tb.express) tb_den=$(d tenants.tb.quota tenants.tb.class_cap) tb_nt=$(d tenants.tb.no_tokens)
tb_w=$(d tenants.tb.wakeups) tb_o=$(d tenants.tb.over_target)
log "6 s: ta express $ta_x, quota denials $ta_q; tb express $tb_x, quota denials $tb_den, out of tokens $tb_nt, wakeups $tb_w, over target $tb_o"
[ "$ta_q" -gt 0 ] || fail_logs "the runaway in ta was never held by ta's quota"
echo "ok: the runaway in tenant ta is held to ta's quota ($ta_q denials in 6 s)"
[ "$tb_x" -gt 50 ] || fail_logs "tb's agent got only $tb_x express dispatches"
[ "$tb_den" -eq 0 ] || fail_logs "tb's agent was denied $tb_den times by a quota while ta's runaway ran"
echo "ok: tenant tb keeps its express dispatches ($tb_x) with no quota denials"
[ "$tb_w" -gt 0 ] || fail_logs "no wakeup of tb measured"
[ "$tb_o" -le "$tb_w" ] || fail_logs "over-target count $tb_o exceeds wakeups $tb_w"
hs=$(hist_sum /tmp/s1 tb) w=$(snap_sum /tmp/s1 tenants.tb.wakeups)
[ "$hs" -gt 0 ] && [ $((hs + 2)) -ge "$w" ] || fail_logs "tb's histogram sums to $hs, wakeups $w"
echo "ok: tb's wakeups measured ($tb_w, $tb_o over target; histogram sums to $hs of $w)"
grep -q 'scx_express_tenant_wakeup_latency_us_bucket{tenant="tb",le="+Inf"}' /tmp/metrics.prom ||
    fail "metrics file lacks the tenant histogram"
grep -q 'scx_express_tenant_quota_total{tenant="ta"}' /tmp/metrics.prom ||
    fail "metrics file lacks the tenant counters"
echo "ok: OpenMetrics has the per-tenant counters and histogram"

# b) A reload takes tb's budget away, then gives it back.
config "$(printf 'burst_ms = 0\nrate = 0.0\nmax_share = 0.5')" >/tmp/t.toml
kill -HUP "$SCX_PID"
wait_until 10 grep -q "reloaded /tmp/t.toml" /tmp/scx.log || fail_logs "reload not logged"
window 4
tb_x=$(d tenants.tb.express) tb_nt=$(d tenants.tb.no_tokens)
log "4 s with tb's budget at 0: tb express $tb_x, out of tokens $tb_nt"
[ "$tb_x" -le 2 ] || fail_logs "tb has no budget, yet $tb_x express dispatches"
[ "$tb_nt" -gt 0 ] || fail_logs "tb has no budget, yet no denial"
config "$TB_BUDGET" >/tmp/t.toml
kill -HUP "$SCX_PID"
# shellcheck disable=SC2016 # expanded by the inner shell, on each try
wait_until 10 sh -c '[ "$(grep -c "reloaded /tmp/t.toml" /tmp/scx.log)" -ge 2 ]' ||
    fail_logs "second reload not logged"
window 4
tb_x=$(d tenants.tb.express)
[ "$tb_x" -gt 30 ] || fail_logs "tb's budget restored, yet only $tb_x express dispatches"
echo "ok: reloads change tb's budget live (denied, then $tb_x express dispatches in 4 s)"
[ "$(dmesg | grep -c 'sched_ext: BPF scheduler "express')" -le 1 ] || fail "the scheduler was re-attached"

# c) The agent's process moves to ta's cgroup: it is in tenant ta now.
echo "$AGT" >"$CG/ta/cgroup.procs" || fail "cannot move the agent"
wait_until 10 sh -c "[ \"\$(scx_express ps | awk -v t=$ATID '\$1 == t { print \$9 }')\" = ta ]" ||
    fail_logs "ps does not show the moved agent loop $ATID in tenant ta"
echo "ok: ps shows the moved agent loop in tenant ta"
window 4
tb_w=$(d tenants.tb.wakeups) ta_w=$(d tenants.ta.wakeups)
log "4 s after the move: tb wakeups $tb_w, ta wakeups $ta_w"
[ "$tb_w" -eq 0 ] || fail_logs "tb still counts $tb_w wakeups after the move"
[ "$ta_w" -gt 0 ] || fail_logs "ta counts no wakeups of the moved agent"
echo "ok: the per-tenant stats followed the move"

# d) Holds (classes.agent.hold_us, whole sleeps by default) need a
# saturated machine: plain hogs, in no tenant and unmarked. The tool
# server joins the agent in ta, marked agent: an unmarked server queued
# behind the hogs when the loop sleeps makes each hold step aside for it
# (hold_partner, the reply needs that CPU), and no hold would reach the
# quota check this part tests.
SRV=$(line_value /tmp/agent.out tool_server_pid 10) || fail "the agent printed no tool_server_pid"
echo "$SRV" >"$CG/ta/cgroup.procs" || fail "cannot move the tool server"
scx_express mark --pid "$SRV" --class agent >/dev/null || fail "marking the tool server failed"
for _ in 1 2 3 4; do /opt/w/hog --duration 12 >/dev/null 2>&1 & done
window 6
holds=$(d classes.agent.holds) noq=$(d classes.agent.hold_no_quota) held=$(d classes.agent.held_us)
log "6 s saturated, the agent in ta: holds $holds, refused for quota $noq, held $held us, stepped aside for a partner $(d classes.agent.hold_partner)"
[ "$noq" -gt 0 ] || fail_logs "no hold was refused for ta's quota"
# ta's quota refills 0.02 x 2 CPUs x 100 ms = 4 ms per 100 ms and holds
# one such period's worth: at most 60 periods' worth in 6 s plus the full
# bucket at the start, plus one hold (5 ms) per CPU started in a race.
# The class's (max_share 1.0) would let the agent hold most of its sleeps.
bound=$((61 * 4000 + 2 * 5000))
[ "$held" -le "$bound" ] || fail_logs "held $held us for ta's tasks in 6 s: over ta's share ($bound)"
echo "ok: holds for ta's tasks stay within ta's quota ($held us held, $noq refused, $holds taken)"

if dmesg_has 'runnable task stall'; then fail "the kernel saw a stall"; fi
check "still attached" sched_state_is enabled
kill "$HOG" "$AGT" 2>/dev/null
wait "$HOG" "$AGT"
stop_scx
