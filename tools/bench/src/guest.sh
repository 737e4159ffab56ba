# shellcheck shell=sh
# scx_express_bench, guest side: one boot runs one scheduler through every
# repeat x scenario x workload cell of the plan and sends each cell's raw
# output to the host with export_file. `scx_express_bench` writes the header
# above (vmtest keys and BENCH_* settings); bench.KEY=VALUE words on the
# kernel command line override BENCH_KEY (the bundle runner boots one
# initramfs once per scheduler with bench.sched=NAME).
#
# Cell file format (parsed by parse.rs):
#   @@bench sched=S scenario=C workload=W repeat=R
#   @@meta KEY=VALUE ...
#   @@file NAME        (then the file's text, up to the next @@ line)
#   @@end
# shellcheck source=../../../tests/vm/guest-lib.sh
. /lib/vmtest/guest-lib.sh

read -r _cmdline </proc/cmdline
for _a in $_cmdline; do
    case $_a in
    bench.*=*)
        _k=${_a%%=*}
        _k=${_k#bench.}
        case $_k in '' | *[!a-z_]*) continue ;; esac
        # _k is [a-z_] only (the case above): ASCII ranges are exact.
        # shellcheck disable=SC2018,SC2019
        eval "BENCH_$(echo "$_k" | tr a-z A-Z)=\${_a#*=}"
        ;;
    esac
done

: "${BENCH_SCHED:?no scheduler (BENCH_SCHED or bench.sched=)}"
: "${BENCH_SCENARIOS:?}" "${BENCH_WORKLOADS:?}"
# Set from plan.json by the bench (run.rs, Bundle::env), whose main.rs holds
# their defaults; no second copy here.
: "${BENCH_REPEAT_FROM:?}" "${BENCH_REPEAT_TO:?}" "${BENCH_DURATION:?}"
: "${BENCH_WARM:?}" "${BENCH_HELPERS:?}" "${BENCH_STREAMS:?}"
: "${BENCH_CYC_INTERVAL_US:?}" "${BENCH_ATTACH_TIMEOUT:=180}"
# The agent stand-ins' shape (scx_express_bench --agent-reply-us,
# --agent-burst-iters).
: "${BENCH_AGENT_REPLY_US:?}" "${BENCH_AGENT_BURST_ITERS:?}"
agent_shape="--reply-delay-us $BENCH_AGENT_REPLY_US --burst-iters $BENCH_AGENT_BURST_ITERS"
# How long each noise outlasts its measurement: main.rs NOISE_TAIL_S and
# GO_WARMUP_S say why.
: "${BENCH_NOISE_TAIL:?}" "${BENCH_GO_WARMUP:?}"
# Another config for the express boot (`runner.sh --append
# bench.express_config=/opt/w/x.toml`, a file in the bundle's workloads).
: "${BENCH_EXPRESS_CONFIG:=/etc/bench/express.toml}"
n=$VMTEST_SMP
D=$BENCH_DURATION
W=/opt/w
S=$BENCH_SCHED
# Lists are '+'-separated (vmtest headers split words on commas).
scenarios=$(echo "$BENCH_SCENARIOS" | tr '+,' '  ')
workloads=$(echo "$BENCH_WORKLOADS" | tr '+,' '  ')

# The manual fix of the published study: `taskset -c 0-3 nice -n -10` on a
# 16-CPU host, i.e. the first quarter of the CPUs (at least one).
nice_ncpu=$((n / 4))
[ "$nice_ncpu" -ge 1 ] || nice_ncpu=1
nice_cpus=0-$((nice_ncpu - 1))

# Net and disk noise grow with the machine, as the CPU hogs do: a fixed
# load leaves most of a bigger guest idle, and then no scheduler has
# anything to decide. iperf3 (3.12 here) runs its client and its server
# on one thread each, so one client and server pair per two vCPUs (at
# least one); fio two jobs per vCPU (bench_disk_jobs). At 2 vCPUs: one
# pair, 4 jobs.
net_pairs=$((n / 2))
[ "$net_pairs" -ge 1 ] || net_pairs=1
DISK_NOISE_JOBS=$(bench_disk_jobs)
export DISK_NOISE_JOBS

# --- Scheduler ------------------------------------------------------------
# Another scx_express build for the express boot (`runner.sh --append
# bench.express_bin=/opt/w/NAME`, a binary in the bundle's workloads): two
# builds A/B'd from one bundle, their boots interleaved on one host, where
# two bundles would run minutes or machines apart. It replaces the
# bundle's binary, so the CLI calls below (mark, ps, stats) use it too.
if [ "$S" = express ] && [ -n "${BENCH_EXPRESS_BIN:-}" ]; then
    [ -x "$BENCH_EXPRESS_BIN" ] ||
        fail "bench.express_bin=$BENCH_EXPRESS_BIN: not an executable in the guest (put it in workloads/build/ before bundling: it lands in /opt/w/)"
    cp "$BENCH_EXPRESS_BIN" "$(command -v scx_express)" ||
        fail "bench.express_bin: could not install $BENCH_EXPRESS_BIN"
fi
# alive PID: the process exists and is not a zombie (an exited child
# stays one until the shell reaps it, and kill -0 still succeeds on it).
alive() {
    [ -r "/proc/$1/stat" ] && [ "$(cut -d')' -f2 "/proc/$1/stat" | cut -d' ' -f2)" != Z ]
}
spid=
case $S in
eevdf | eevdf-nice | eevdf-fifo) ;;
eevdf-probes)
    # The control that prices the CUDA uprobes alone: EEVDF schedules, and
    # `trace --no-events` attaches exactly the probes the scheduler would
    # (launch windows included), no tracepoints. Each hit is a trap that
    # costs ~1 us on hardware and ~100x that of a vCPU under TCG.
    scx_express trace --config "$BENCH_EXPRESS_CONFIG" --probe-policy scheduler \
        --no-events >/tmp/sched.log 2>&1 &
    tpid=$! # stopped at the wrap-up
    # trace logs this line once it runs; as the scheduler does, it then
    # probes each library when a process maps it.
    trace_up() { grep -q 'Ctrl-C stops' /tmp/sched.log; }
    trace_up_or_gone() { trace_up || ! alive "$tpid"; }
    wait_until "$BENCH_ATTACH_TIMEOUT" trace_up_or_gone || true
    trace_up || {
        tail -n 30 /tmp/sched.log
        fail "scx_express trace did not start (its log is above)"
    }
    log "bench: scx_express trace is running (probes, no scheduler)"
    ;;
express)
    scx_express --config "$BENCH_EXPRESS_CONFIG" >/tmp/sched.log 2>&1 &
    spid=$!
    ;;
rustland | bpfland | lavd | cosmos)
    "scx_$S" >/tmp/sched.log 2>&1 &
    spid=$!
    ;;
*) fail "unknown scheduler '$S'" ;;
esac
attached_or_gone() { [ "$(sched_state)" = enabled ] || ! alive "$spid"; }
attach_cs=0
if [ -n "$spid" ]; then
    t0=$(uptime_cs)
    # A scheduler that exits at once (a load error) fails the boot at once,
    # not after the whole attach timeout.
    wait_until "$BENCH_ATTACH_TIMEOUT" attached_or_gone || true
    if [ "$(sched_state)" != enabled ]; then
        tail -n 30 /tmp/sched.log
        alive "$spid" || fail "$S exited before attaching (its log is above)"
        fail "$S did not attach within ${BENCH_ATTACH_TIMEOUT}s"
    fi
    attach_cs=$(($(uptime_cs) - t0))
    log "bench: $S attached after ${attach_cs}0 ms ($(sched_ops_name))"
    # Which build ran (an A/B may replace the bundle's): the binary's hash.
    bin=$(readlink "/proc/$spid/exe")
    log "bench: $S binary $bin sha256 $(sha256sum "$bin" | cut -c1-16)"
fi

disk_kind=none
if [ -n "${VMTEST_DISK:-}" ] && [ -b "$VMTEST_DISK" ]; then disk_kind=nvme; fi
{
    echo "sched=$S"
    echo "kernel=$VMTEST_KREL"
    echo "smp=$n"
    echo "mem_mb=$VMTEST_MEM_MB"
    echo "attach_cs=$attach_cs"
    echo "ops=$(sched_ops_name 2>/dev/null || echo none)"
    echo "attempt=$VMTEST_ATTEMPT"
    echo "disk=$disk_kind"
    echo "nice_cpus=$nice_cpus"
} >/tmp/info.txt
export_file /tmp/info.txt "info-$S.txt"

# --- Helpers ----------------------------------------------------------------
# wrap CMD...: run a workload the way this "scheduler" treats it, killed
# if it runs far past its duration (under chrt -f, a process's CPU-bound
# helper threads can starve its own launcher for good). The limit counts
# from the workload's start: for agent and scale that is before their
# classification (scx_express runs 3+ times, seconds under cpu4x) and
# their warmup (up to BENCH_GO_WARMUP s), which a 2 s smoke cell's 14 s
# limit did not leave room for on a slow CI host.
lim=$((2 * D + BENCH_GO_WARMUP + 10))
# Seconds the go-file workloads may warm up: the noise runs
# BENCH_GO_WARMUP s longer for them, less a second for the go file's path.
warm_s=$((BENCH_GO_WARMUP - 1))
wrap() {
    case $S in
    eevdf-nice) timeout -s KILL "$lim" taskset -c "$nice_cpus" nice -n -10 "$@" ;;
    eevdf-fifo) timeout -s KILL "$lim" chrt -f 10 "$@" ;;
    *) timeout -s KILL "$lim" "$@" ;;
    esac
}

# parse_class PS_FILE TID: the CLASS column of TID's first row.
parse_class() {
    awk -v t="$2" '$1 == t { print $4; exit }' "$1"
}

sched_ticks() {
    if [ -n "$spid" ]; then task_cputime "$spid" || echo 0; else echo 0; fi
}

noise_pids=''
# noise_start SCENARIO SECS DIR
noise_start() {
    noise_pids=''
    cpu=0
    case $1 in
    cpu1x) cpu=$n ;;
    cpu4x | heavy) cpu=$((4 * n)) ;;
    esac
    if [ "$cpu" -gt 0 ]; then
        stress-ng --cpu "$cpu" --cpu-method fft -t "$2" --metrics-brief \
            --yaml "$3/stress.yaml" >"$3/stress.log" 2>&1 &
        noise_pids="$noise_pids $!"
    fi
    case $1 in
    net | heavy)
        # The servers run for the whole boot (started below); a client
        # retries while its server is not listening yet. Pair k reports
        # to iperf-k.json (the parser adds the pairs up).
        for k in $(seq 1 "$net_pairs"); do
            (
                i=0
                while [ $i -lt 50 ]; do
                    iperf3 -c 127.0.0.1 -p $((5200 + k)) -P "$BENCH_STREAMS" -t "$2" -J \
                        >"$3/iperf-$k.json" 2>&1 && exit 0
                    grep -qE 'refused|busy' "$3/iperf-$k.json" || exit 1
                    i=$((i + 1))
                    sleep 0.1
                done
            ) &
            noise_pids="$noise_pids $!"
        done
        ;;
    esac
    case $1 in
    disk | heavy)
        if [ "$disk_kind" = nvme ]; then
            fio_target="--filename=$VMTEST_DISK --direct=1"
        else # no disk: a file on tmpfs (no O_DIRECT there)
            fio_target="--filename=/tmp/fio.dat --size=256M --direct=0"
        fi
        # shellcheck disable=SC2086
        disk_noise "$2" $fio_target --group_reporting --output-format=json \
            --output="$3/fio.json" >"$3/fio.log" 2>&1 &
        noise_pids="$noise_pids $!"
        ;;
    esac
}

# noise_wait SECS: wait for the noise to end by itself; kill what outlives
# SECS more seconds.
noise_wait() {
    [ -n "$noise_pids" ] || return 0
    (
        sleep "$1"
        # shellcheck disable=SC2086
        kill $noise_pids 2>/dev/null
    ) &
    _guard=$!
    for p in $noise_pids; do wait "$p"; done
    kill "$_guard" 2>/dev/null
    wait "$_guard" 2>/dev/null
    # A client outliving the guard (not a server).
    # shellcheck disable=SC2013 # awk prints one pid per line: words are lines
    for p in $(cat /proc/[0-9]*/stat 2>/dev/null | awk '$2 == "(iperf3)" { print $1 }'); do
        case " $iperf_srvs " in *" $p "*) ;; *) kill "$p" 2>/dev/null ;; esac
    done
    rm -f /tmp/fio.dat
    return 0
}

# run_workload WORKLOAD DIR: run it in the foreground (the measurement).
run_workload() {
    case $1 in
    scale) go_scale "$2" ;;
    agent | agent-exec)
        touch "$2/go"
        wait "$wpid"
        ;;
    *) run_one "$1" "$2" ;;
    esac
    _rc=$?
    # The measurement's end, against the noise's planned end (cell loop).
    w_end=$(uptime_cs)
    # The express lane's counters after the workload (lane0.txt, before:
    # the cell loop). Stats are a snapshot taken once a second, and no
    # thread of the workload's class runs after it ends, so 1.1 s later
    # they hold all of that class's work.
    if [ "$S" = express ]; then
        sleep 1.1
        scx_express stats --flat >"$2/lane1.txt" 2>&1
    fi
    return "$_rc"
}

# mark_agent OUT TIDFILE MARKLOG: under express, mark the agent loop whose
# ids OUT prints and its tool-server process (agent loops are opt-in:
# markers, rules or mark), the processes eevdf-nice's `nice` covers; the
# loop's tid goes to TIDFILE.
mark_agent() {
    tid=$(line_value "$1" agent_tid 10) || return 0
    echo "$tid" >"$2"
    scx_express mark --tid "$tid" --class agent >>"$3" 2>&1
    if srv=$(line_value "$1" tool_server_pid 1); then
        scx_express mark --pid "$srv" --class agent >>"$3" 2>&1
    fi
}

# run_one WORKLOAD DIR: one workload process (and its classification).
run_one() {
    case $1 in
    decode) wrap "$W/decode" --duration "$D" --json >"$2/workload.out" 2>"$2/workload.err" & ;;
    mixed) wrap "$W/decode" --duration "$D" --helpers "$BENCH_HELPERS" --json \
        >"$2/workload.out" 2>"$2/workload.err" & ;;
    wakeup)
        # SCHED_OTHER unless the fifo variant: cyclictest sets its thread's
        # policy itself, so chrt alone would be undone.
        prio=''
        [ "$S" = eevdf-fifo ] && prio='-p 10'
        # shellcheck disable=SC2086
        wrap cyclictest -q -D "$D" -i "$BENCH_CYC_INTERVAL_US" -t 1 -h 20000 $prio \
            --json="$2/cyclictest.json" >/dev/null 2>"$2/workload.err" &
        ;;
    *) echo "unknown workload $1" >"$2/workload.err"; return 1 ;;
    esac
    wpid=$!
    if [ "$S" = express ]; then
        case $1 in
        decode | mixed)
            # The launcher must be gpu through the CUDA uprobes alone: ask
            # `scx_express ps` 0.5 s in, and once more 1 s later if not.
            if line_value "$2/workload.out" launcher_tid 10 >"$2/tid"; then
                sleep 0.5
                ps_until_gpu "$2/ps.txt" "$2/tid"
            fi
            ;;
        esac
    fi
    wait "$wpid"
}

# setup_workload WORKLOAD DIR: before the noise starts, start a workload
# that waits for a go file (agent, agent-exec, scale) and classify it, so
# that its whole measurement runs in the noise. (Marking under express
# runs scx_express three times or more: under cpu4x in a TCG guest that
# took about 3 s, which had pushed most of the agent's measured steps past
# the end of the noise, for express only.) Other workloads start in
# run_workload.
setup_workload() {
    case $1 in
    agent | agent-exec) start_agent "$1" "$2" ;;
    scale) start_scale "$2" ;;
    esac
}

# start_agent WORKLOAD DIR: the agent stand-in, waiting for DIR/go, its
# loop and tool server marked under express; its pid in $wpid.
start_agent() {
    rm -f "$2/go"
    # A subprocess step takes 10-100x a socket one under TCG (fork,
    # exec, faults): 20 warmup steps, not 200 (under cpu4x even 20 take
    # seconds: the time bound ends such a warmup early).
    tool='socket' warm=200
    [ "$1" = agent ] || tool='exec' warm=20
    # It waits for the go file after printing its ids: the steps it
    # measures all run with its threads classified.
    # shellcheck disable=SC2086 # agent_shape: flags and numbers
    wrap "$W/agent" --tool "$tool" --duration "$D" --warmup "$warm" \
        --warmup-max-s "$warm_s" --json --cdf $agent_shape \
        --go-file "$2/go" >"$2/workload.out" 2>"$2/workload.err" &
    wpid=$!
    if [ "$S" = express ]; then
        # agent-exec has no server; its tools are forked by the loop.
        mark_agent "$2/workload.out" "$2/tid" "$2/mark.txt"
        [ ! -f "$2/tid" ] || scx_express ps >"$2/ps.txt" 2>&1
    fi
}

# ps_all_gpu PS_FILE TIDFILE...: every thread classified gpu in PS_FILE.
ps_all_gpu() {
    _ps=$1
    shift
    for _f in "$@"; do
        [ "$(parse_class "$_ps" "$(cat "$_f")")" = gpu ] || return 1
    done
}

# ps_until_gpu PS_FILE TIDFILE...: `scx_express ps` into PS_FILE, and once
# more 1 s later (appended) unless every thread was gpu the first time.
ps_until_gpu() {
    scx_express ps >"$1" 2>&1
    ps_all_gpu "$@" && return 0
    sleep 1
    scx_express ps >>"$1" 2>&1
}

# start_scale DIR: the scale workload: one decode launcher per two vCPUs (one
# per "GPU", at least one) and two agent loops at once, each treated as its
# own workload is (wrap; under express the launchers classified by the CUDA
# uprobes alone, the syncs they make while waiting for the go file; the
# agents marked). Under express, `scx_express ps` checks every class here,
# before the noise: run during the measurement, under cpu4x at 8 vCPUs, the
# CLI (a fair task among 32 hogs) took seconds and often listed the
# launchers only after they had ended. launcher-I.out, agent-J.out, *.tid,
# ps.txt.
start_scale() {
    nl=$((n / 2))
    [ "$nl" -ge 1 ] || nl=1
    echo "launchers=$nl" >"$1/scale.txt"
    echo "agents=2" >>"$1/scale.txt"
    rm -f "$1/go"
    pids=''
    for _l in $(seq 1 "$nl"); do
        wrap "$W/decode" --duration "$D" --json --go-file "$1/go" \
            >"$1/launcher-$_l.out" 2>"$1/launcher-$_l.err" &
        pids="$pids $!"
    done
    for _a in 1 2; do
        # shellcheck disable=SC2086 # agent_shape: flags and numbers
        wrap "$W/agent" --duration "$D" --warmup 200 --warmup-max-s "$warm_s" \
            --json --go-file "$1/go" $agent_shape \
            >"$1/agent-$_a.out" 2>"$1/agent-$_a.err" &
        pids="$pids $!"
    done
    if [ "$S" = express ]; then
        for _a in 1 2; do mark_agent "$1/agent-$_a.out" "$1/agent-$_a.tid" "$1/mark.txt"; done
        tids=''
        for _l in $(seq 1 "$nl"); do
            line_value "$1/launcher-$_l.out" launcher_tid 10 >"$1/launcher-$_l.tid" &&
                tids="$tids $1/launcher-$_l.tid"
        done
        # shellcheck disable=SC2086 # tids: file names without spaces
        ps_until_gpu "$1/ps.txt" $tids
    fi
}

# go_scale DIR: start_scale's processes measure (DIR/go), then wait.
go_scale() {
    # Every process waits for the go file after printing its ids: all
    # measure together, the agents marked from their first step.
    touch "$1/go"
    _src=0
    for _p in $pids; do
        wait "$_p"
        _w=$?
        [ "$_w" = 0 ] || [ "$_src" != 0 ] || _src=$_w
    done
    # The first lines of every failure, for the cell's error.
    for f in "$1"/*.err; do
        [ -s "$f" ] && echo "${f##*/}: $(tail -n 1 "$f")"
    done >"$1/workload.err"
    return "$_src"
}

# --- The plan -----------------------------------------------------------------
# A boot carries the tools of the scenarios it was built for: a scenario
# appended later (`runner.sh --append bench.scenarios=...`) whose tool is
# missing stops the boot here rather than fail each cell. BENCH_TOOL_NEEDS
# (run.rs, from its TOOLS) names each such tool and its scenarios.
for e in $(echo "$BENCH_TOOL_NEEDS" | tr / ' '); do
    b=${e%%:*}
    command -v "$b" >/dev/null 2>&1 && continue
    for c in $(echo "${e#*:}" | tr + ' '); do
        case " $scenarios " in *" $c "*)
            log "bench: scenario $c needs $b, which this boot does not carry: build the bundle with $c in --scenarios"
            exit 1
            ;;
        esac
    done
done
# The iperf3 servers (one per pair, ports 5201 on) for the whole boot:
# started per cell, a server was not always listening in time under the
# heavy scenario's load.
iperf_srvs=''
case " $scenarios " in *" net "* | *" heavy "*)
    for k in $(seq 1 "$net_pairs"); do
        iperf3 -s -p $((5200 + k)) >"/tmp/iperf-server-$k.log" 2>&1 &
        iperf_srvs="$iperf_srvs $!"
    done
    wait_until 20 sh -c "[ \$(netstat -ltn 2>/dev/null | grep -cE ':52[0-9][0-9] ') -ge $net_pairs ]" ||
        log "bench: not all $net_pairs iperf3 servers listening after 20 s"
    ;;
esac
total=0
for r in $(seq "$BENCH_REPEAT_FROM" "$BENCH_REPEAT_TO"); do
    for c in $scenarios; do for w in $workloads; do total=$((total + 1)); done; done
done
i=0
bad=0
t_start=$(uptime_cs)
c_start=$(sched_ticks)
for r in $(seq "$BENCH_REPEAT_FROM" "$BENCH_REPEAT_TO"); do
    for c in $scenarios; do
        for w in $workloads; do
            i=$((i + 1))
            log "bench: cell $i/$total $S $c $w r$r"
            d=/tmp/cell
            rm -rf "$d"
            mkdir -p "$d"
            t0=$(uptime_cs)
            k0=$(sched_ticks)
            secs=$((BENCH_WARM + D + BENCH_NOISE_TAIL))
            setup_workload "$w" "$d"
            case $w in agent | agent-exec | scale) secs=$((secs + BENCH_GO_WARMUP)) ;; esac
            margin=''
            # The lane's counters before the noise starts: `scx_express
            # stats` execs a large binary, about a second under the disk
            # noise in a TCG guest whatever the scheduler, and taken after
            # the noise's start it used up the noise's tail and ran cells
            # past the noise's end (docs/benchmarks.md, "Net and disk at 8
            # vCPUs with the peers again"). The window then also holds the
            # warm-up's go-file polls (agent, agent-exec, scale: one wakeup
            # per 5 ms, no CPU work to speak of).
            [ "$S" != express ] || scx_express stats --flat >"$d/lane0.txt" 2>&1
            if [ "$c" != baseline ]; then
                n0=$(uptime_cs)
                noise_start "$c" "$secs" "$d"
                sleep "$BENCH_WARM"
            fi
            run_workload "$w" "$d"
            wrc=$?
            # How long the noise outlasted the measurement (negative: it
            # ended first, and the cell measured partly without it).
            [ "$c" = baseline ] || margin=" noise_margin_cs=$((n0 + secs * 100 - w_end))"
            noise_wait 20
            k1=$(sched_ticks)
            t1=$(uptime_cs)
            state=$(sched_state)
            [ "$wrc" = 0 ] || bad=$((bad + 1))
            {
                echo "@@bench sched=$S scenario=$c workload=$w repeat=$r"
                echo "@@meta rc=$wrc limit_s=$lim wall_cs=$((t1 - t0)) sched_ticks=$((k1 - k0)) state=$state disk=$disk_kind duration_s=$D$margin"
                for f in "$d"/*; do
                    [ -f "$f" ] || continue
                    echo "@@file ${f##*/}"
                    cat "$f"
                    echo
                done
                echo "@@end"
            } >/tmp/cell.txt
            export_file /tmp/cell.txt "cell-$S-$c-$w-$r.txt"
        done
    done
done

# --- Wrap up ------------------------------------------------------------------
# shellcheck disable=SC2086 # a list of pids
[ -z "$iperf_srvs" ] || kill $iperf_srvs 2>/dev/null
if [ -n "${tpid:-}" ]; then
    # The control's trace log names each library it probed and how many
    # probe points (--no-events counts hits only of threads still alive
    # when it stops: none once the cells' workloads have ended).
    kill -INT "$tpid"
    wait "$tpid" || log "bench: scx_express trace exited rc=$? after SIGINT"
    export_file /tmp/sched.log "trace-$S.txt"
fi
t_end=$(uptime_cs)
c_end=$(sched_ticks)
state=$(sched_state)
{
    echo "sched=$S"
    echo "cells=$total"
    echo "failed_cells=$bad"
    echo "wall_cs=$((t_end - t_start))"
    echo "sched_ticks=$((c_end - c_start))"
    echo "state_at_end=$state"
    echo "--- sched_ext kernel messages"
    dmesg | grep -i sched_ext | tail -n 20
    echo "--- scheduler log (tail)"
    [ -f /tmp/sched.log ] && tail -n 20 /tmp/sched.log
} >/tmp/final.txt
export_file /tmp/final.txt "final-$S.txt"
log "bench: $S done: $total cells, $bad failed, $(((t_end - t_start) / 100)) s"

if [ -n "$spid" ]; then
    [ "$state" = enabled ] || fail "$S was no longer attached at the end (state $state)"
    kill -INT "$spid"
    wait "$spid" || log "bench: $S exited rc=$? after SIGINT"
fi
[ "$bad" = 0 ] || fail "$bad of $total cells failed"
