#!/bin/sh
# Budget bound: a gpu-class thread that launches and then spins at 100% CPU,
# pinned beside a CPU hog on the same CPU, gets no more than its fair share
# (1/2) plus its class rate (0.2 here), within 10%: at most 0.77 of the CPU.
# The hog is never starved, and nothing stalls.
# vmtest: smp=2 timeout=240 bins=target/release/scx_express files=workloads/build:/opt/w
# shellcheck source=../guest-lib.sh
. /lib/vmtest/guest-lib.sh

printf '[classes.gpu]\nburst_ms = 20\nrate = 0.2\nmax_share = 1.0\n' >/tmp/budget.toml
start_scx /tmp/scx.log --config /tmp/budget.toml

# The abuser: launches with no simulated GPU time, so its syncs never sleep.
FAKECUDA_KERNEL_US=0 taskset -c 1 /opt/w/decode --duration 30 >/tmp/abuser.out 2>&1 &
ab=$!
/opt/w/hog --cpu 1 --duration 30 >/tmp/hog.out &
hg=$!
wait_until 10 grep -q launcher_tid /tmp/abuser.out || fail "abuser did not start"
tid=$(sed -n 's/^launcher_tid=//p' /tmp/abuser.out)
sleep 5
scx_express ps | grep -E "^ *(TID|$tid) " || true
[ "$(scx_express ps | awk -v t="$tid" '$1 == t { print $4 }')" = gpu ] || fail "abuser $tid is not classified gpu"
a0=$(task_cputime "$ab") h0=$(task_cputime "$hg") nt0=$(scx_stat classes.gpu.no_tokens)
sleep 15
a1=$(task_cputime "$ab") h1=$(task_cputime "$hg")
da=$((a1 - a0)) dh=$((h1 - h0)) total=$((da + dh))
log "CPU 1 over 15 s: abuser $da ticks, hog $dh ticks (of $total)"
log "express: $(scx_stat classes.gpu.requeue) requeues, $(scx_stat classes.gpu.no_tokens) out-of-tokens"
[ "$total" -ge 1200 ] || fail "CPU 1 was not kept busy ($total of 1500 ticks)"
[ $((da * 100)) -le $((total * 77)) ] || fail "abuser took $((da * 100 / total))% of CPU 1 (bound 77%)"
echo "ok: abuser held $((da * 100 / total))% of CPU 1 (bound: 1/2 + 0.2, +10% = 77%)"
[ $((dh * 100)) -ge $((total * 23)) ] || fail "hog got only $((dh * 100 / total))%: starved"
echo "ok: hog kept $((dh * 100 / total))% of CPU 1"
# The bucket level at one instant depends on the phase of drain and refill;
# that it keeps running dry during the window is what shows the charging.
tokens=$(scx_express ps | awk -v t="$tid" '$1 == t { print int($8) }')
nt=$(($(scx_stat classes.gpu.no_tokens) - nt0))
log "abuser tokens now: ${tokens} ms of a 20 ms burst; out of tokens $nt times in the window"
[ "$nt" -gt 0 ] || fail "the abuser never ran out of tokens: its express time is not charged"
echo "ok: the abuser's express time is charged: it ran out of tokens $nt times in 15 s"
if dmesg_has 'runnable task stall'; then fail "the kernel saw a stall"; fi
echo "ok: no stall"
kill "$ab" "$hg" 2>/dev/null
wait "$ab" "$hg"
stop_scx
