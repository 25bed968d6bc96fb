#!/usr/bin/env bash
# slurm_one_node.sh - start a throw-away single-node Slurm cluster (munged +
# slurmctld + slurmd) in a fresh temporary directory, run ONE srun command on
# it, and tear everything down again.  Meant for CTest tests that must prove a
# program launches under Slurm.  See README.md next to this file.
#
# Usage: slurm_one_node.sh [--ntasks N] [--timeout SECONDS] -- COMMAND [ARGS...]
#
# Exit status: srun's exit status (124 if --timeout expired); 2 if the cluster
# could not be brought up (or on a usage error).
#
# Environment:
#   SLURM_ONE_NODE_KEEP=1               keep the temporary directory (logs, config)
#   SLURM_ONE_NODE_STARTUP_TIMEOUT=S    bound for bringing the cluster up (default 30)

set -u -o pipefail
# A closed stdin would be re-used by the first file opened below; srun's stdin
# (forwarded to task 0) must be the caller's or /dev/null.
{ true 3<&0; } 2>/dev/null || exec 0</dev/null

prog=${0##*/}
ntasks=2
run_timeout=120
startup_timeout=${SLURM_ONE_NODE_STARTUP_TIMEOUT:-30}
keep=${SLURM_ONE_NODE_KEEP:-0}

usage() {
    cat <<EOF
Usage: $prog [--ntasks N] [--timeout SECONDS] -- COMMAND [ARGS...]

Starts a private single-node Slurm cluster in a temporary directory, runs
'srun --ntasks=N COMMAND ARGS...' on it (default N=2, timeout 120 s), then
stops every daemon and removes the directory (kept if SLURM_ONE_NODE_KEEP=1).
Exit status: srun's, 124 on timeout, 2 if the cluster could not be started.
EOF
}

# ---------------------------------------------------------------- arguments --
is_uint() { [[ $1 =~ ^[0-9]+$ ]] && (( 10#$1 > 0 )); }
usage_error() { echo "$prog: $1" >&2; usage >&2; exit 2; }

while (( $# > 0 )); do
    case $1 in
        --ntasks)    (( $# >= 2 )) || usage_error "--ntasks needs a value"
                     ntasks=$2; shift 2 ;;
        --ntasks=*)  ntasks=${1#*=}; shift ;;
        --timeout)   (( $# >= 2 )) || usage_error "--timeout needs a value"
                     run_timeout=$2; shift 2 ;;
        --timeout=*) run_timeout=${1#*=}; shift ;;
        -h|--help)   usage; exit 0 ;;
        --)          shift; break ;;
        -*)          usage_error "unknown option '$1'" ;;
        *)           break ;;
    esac
done
(( $# > 0 )) || usage_error "no COMMAND given"
is_uint "$ntasks"          || usage_error "--ntasks must be a positive integer, got '$ntasks'"
is_uint "$run_timeout"     || usage_error "--timeout must be a positive integer, got '$run_timeout'"
is_uint "$startup_timeout" || usage_error "SLURM_ONE_NODE_STARTUP_TIMEOUT must be a positive integer"
ntasks=$((10#$ntasks)); run_timeout=$((10#$run_timeout)); startup_timeout=$((10#$startup_timeout))

# A caller that itself runs inside a Slurm job (or has SLURM_*/SRUN_* input
# variables set) would otherwise make srun attach to a job id or use options
# that do not exist on this private cluster.
for var in $(compgen -e); do
    [[ $var =~ ^(SLURM|SRUN|SALLOC|SBATCH)_ ]] && unset "$var"
done

# ------------------------------------------------------------------ helpers --
work=""                 # temporary directory
munged_pid="" ctld_pid="" slurmd_pid="" srun_pid=""

# Print the last 20 lines of a log file to stderr.
show_log() {
    [[ -n $1 ]] || return 0
    if [[ -s $1 ]]; then
        echo "---- last 20 lines of ${1##*/} ----" >&2
        tail -n 20 -- "$1" >&2
        echo "----" >&2
    else
        echo "---- ${1##*/}: empty or missing ----" >&2
    fi
}

# fail REASON [LOG...]: one-line reason, log tails, exit 2 (teardown via trap).
fail() {
    local reason=$1; shift
    echo "$prog: error: $reason" >&2
    local f
    for f in "$@"; do show_log "$f"; done
    exit 2
}

# True if PID exists and is not a zombie (our unreaped children stay
# visible to 'kill -0' as zombies, so look at /proc/PID/stat instead).
alive() {
    local line state
    [[ -n $1 ]] && read -r line 2>/dev/null < "/proc/$1/stat" || return 1
    state=${line##*) }
    [[ ${state%% *} != Z ]]
}

# stop_pid PID [GRACE_SECONDS]: SIGTERM, wait up to GRACE, then SIGKILL; reap.
stop_pid() {
    local pid=$1 grace=${2:-5} i
    [[ -n $pid ]] || return 0
    if alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null
        for (( i = 0; i < grace * 10; i++ )); do
            alive "$pid" || break
            sleep 0.1
        done
        if alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null
            for (( i = 0; i < 20; i++ )); do alive "$pid" || break; sleep 0.1; done
        fi
    fi
    wait "$pid" 2>/dev/null
    return 0
}

# Processes of this cluster that are not the daemons we started (nor their
# direct children, e.g. slurmctld's slurmscriptd): slurmstepd and the tasks it
# started.  slurmd and srun hand their environment on, so they all carry
# SLURM_CONF=<our temp dir>/slurm.conf.  Their descendants are included too
# (a task may have cleared its environment).  Result: global array 'leftover'.
find_leftovers() {
    leftover=()
    [[ -n $work ]] || return 0
    local marker="SLURM_CONF=$work/slurm.conf" d pid entry line ppid
    local own=" $$ $munged_pid $ctld_pid $slurmd_pid "
    local -a envv
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        [[ $own == *" $pid "* ]] && continue
        read -r line 2>/dev/null < "$d/stat" || continue
        line=${line##*) }; line=${line#* }; ppid=${line%% *}
        [[ $own == *" $ppid "* ]] && continue
        mapfile -d '' -t envv 2>/dev/null < "$d/environ" || continue
        for entry in "${envv[@]}"; do
            if [[ $entry == "$marker" ]]; then leftover+=("$pid"); break; fi
        done
    done
    local -a queue=("${leftover[@]}") kids
    while (( ${#queue[@]} > 0 )); do
        mapfile -t kids < <(pgrep -P "$(IFS=,; echo "${queue[*]}")" 2>/dev/null)
        queue=()
        for pid in "${kids[@]}"; do
            [[ " ${leftover[*]} " == *" $pid "* ]] && continue
            leftover+=("$pid"); queue+=("$pid")
        done
    done
}

# kill_leftovers [GRACE]: give them GRACE seconds to end on their own (a
# finished step's slurmstepd exits by itself), then SIGTERM, then SIGKILL, and
# wait (bounded) until init has reaped them, so no <defunct> entry is left.
kill_leftovers() {
    local grace=${1:-0} i pid any
    find_leftovers
    (( ${#leftover[@]} > 0 )) || return 0
    for (( i = 0; i < grace * 10 + 50; i++ )); do
        any=0
        for pid in "${leftover[@]}"; do alive "$pid" && { any=1; break; }; done
        (( any )) || break
        if (( i == grace * 10 )); then kill -TERM "${leftover[@]}" 2>/dev/null; fi
        if (( i == grace * 10 + 30 )); then kill -KILL "${leftover[@]}" 2>/dev/null; fi
        sleep 0.1
    done
    for (( i = 0; i < 30; i++ )); do
        any=0
        for pid in "${leftover[@]}"; do [[ -e /proc/$pid ]] && { any=1; break; }; done
        (( any )) || break
        sleep 0.1
    done
}

# A finished slurmstepd is re-parented to PID 1; until PID 1 reaps it, it shows
# up as "[slurmstepd] <defunct>" (some inits reap lazily, ~1 s here).  Wait,
# bounded, for zombies that appeared during this run to disappear.
stepd_before=" $(pgrep -x -d ' ' slurmstepd 2>/dev/null) "
# shellcheck disable=SC2317  # only reached through the EXIT trap
wait_stepd_zombies() {
    local i pid z
    for (( i = 0; i < 30; i++ )); do
        z=0
        for pid in $(pgrep -x -r Z slurmstepd 2>/dev/null); do
            [[ $stepd_before == *" $pid "* ]] || { z=1; break; }
        done
        (( z )) || return 0
        sleep 0.1
    done
}

cleaned=0
# shellcheck disable=SC2317  # only reached through the EXIT trap
cleanup() {
    local rc=$?
    (( cleaned )) && return
    cleaned=1
    trap '' INT TERM HUP          # teardown must not be interrupted
    stop_pid "$srun_pid" 5
    kill_leftovers 0              # slurmstepd + tasks of an unfinished step
    stop_pid "$slurmd_pid" 10
    stop_pid "$ctld_pid" 10       # also ends its child 'slurmscriptd'
    kill_leftovers                # anything that appeared meanwhile
    stop_pid "$munged_pid" 5
    wait_stepd_zombies
    if [[ -n $work && -d $work ]]; then
        if [[ $keep == 1 ]]; then
            echo "$prog: SLURM_ONE_NODE_KEEP=1: kept $work" >&2
        else
            rm -rf -- "$work"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# -------------------------------------------------------------- binaries --
find_bin() {
    local p
    p=$(PATH="$PATH:/usr/sbin:/sbin:/usr/local/sbin" command -v "$1" 2>/dev/null) \
        || fail "required program '$1' not found (PATH=$PATH:/usr/sbin:/sbin)"
    printf '%s\n' "$p"
}
MUNGED=$(find_bin munged)        || exit 2
SLURMCTLD=$(find_bin slurmctld)  || exit 2
SLURMD=$(find_bin slurmd)        || exit 2
SRUN=$(find_bin srun)            || exit 2
SINFO=$(find_bin sinfo)          || exit 2
TIMEOUT=$(find_bin timeout)      || exit 2
find_bin pgrep >/dev/null        || exit 2
MUNGE=$(find_bin munge 2>/dev/null) || MUNGE=""      # optional self-test
UNMUNGE=$(find_bin unmunge 2>/dev/null) || UNMUNGE=""

# ----------------------------------------------------------- temp directory --
work=$(mktemp -d "${TMPDIR:-/tmp}/slurm_one_node.XXXXXX") \
    || fail "mktemp -d failed (TMPDIR=${TMPDIR:-/tmp})"
# munged refuses a socket whose directory path is not executable by all.
chmod 0755 "$work" || fail "chmod $work failed"
mkdir -p "$work/munge" "$work/state" "$work/spool" "$work/log" \
    || fail "cannot create directories in $work"
chmod 0755 "$work/munge"
export SLURM_CONF="$work/slurm.conf"

node=$(hostname -s 2>/dev/null) || node=""
[[ -n $node ]] || node=$(uname -n); node=${node%%.*}
cpus=$(nproc 2>/dev/null) || cpus=1
is_uint "$cpus" || cpus=1

# ------------------------------------------------------------------- munged --
key="$work/munge/munge.key"
sock="$work/munge/munge.socket"
dd if=/dev/urandom of="$key" bs=1 count=1024 status=none 2>/dev/null \
    || dd if=/dev/urandom of="$key" bs=1 count=1024 2>/dev/null \
    || fail "cannot write munge key $key"
chmod 0400 "$key"

"$MUNGED" --foreground --force \
    --socket="$sock" --key-file="$key" \
    --pid-file="$work/munge/munged.pid" --log-file="$work/log/munged.log" \
    --seed-file="$work/munge/munged.seed" \
    >"$work/log/munged.out" 2>&1 </dev/null &
munged_pid=$!

for (( i = 0; i < 100; i++ )); do          # <= 10 s
    [[ -S $sock ]] && break
    alive "$munged_pid" || fail "munged exited during startup" "$work/log/munged.out"
    sleep 0.1
done
[[ -S $sock ]] || fail "munged did not create its socket within 10 s" "$work/log/munged.out"
if [[ -n $MUNGE && -n $UNMUNGE ]]; then
    "$TIMEOUT" 5 "$MUNGE" -n -S "$sock" 2>"$work/log/munge-test.err" \
        | "$TIMEOUT" 5 "$UNMUNGE" -S "$sock" >/dev/null 2>>"$work/log/munge-test.err" \
        || fail "munge credential self-test against $sock failed" \
            "$work/log/munge-test.err" "$work/log/munged.out"
fi

# -------------------------------------------------------------- TCP ports --
# Ports in use (any state) from /proc/net/tcp{,6}; pick random free ones below
# the usual ephemeral range so outgoing connections do not grab them.
used_ports=" "
read_used_ports() {
    local f sl local_addr rest
    used_ports=" "
    for f in /proc/net/tcp /proc/net/tcp6; do
        [[ -r $f ]] || continue
        while read -r sl local_addr rest; do
            [[ $sl == sl ]] && continue
            used_ports+="$((16#${local_addr##*:})) "
        done < "$f"
    done
}
pick_port() {         # pick_port EXCLUDED...
    local p n
    for (( n = 0; n < 1000; n++ )); do
        p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 12000 ))
        [[ $used_ports == *" $p "* || " $* " == *" $p "* ]] && continue
        echo "$p"; return 0
    done
    return 1
}

# -------------------------------------------------------------- slurm.conf --
write_conf() {
    cat > "$SLURM_CONF" <<EOF
# Generated by $prog for a throw-away single-node cluster.
ClusterName=onenode
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$work/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MailProg=/bin/true
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=one Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}
: > "$work/plugstack.conf"     # keep /etc/slurm/plugstack.conf(.d) out

# -------------------------------------------------------- start slurm daemons --
# start_slurm: 0 = node idle; 1 = a port was taken meanwhile (caller retries);
# anything else fails the script.
start_slurm() {
    : > "$work/log/slurmctld.out"; : > "$work/log/slurmd.out"
    rm -f "$work/log/slurmctld.log" "$work/log/slurmd.log"
    "$SLURMCTLD" -D >"$work/log/slurmctld.out" 2>&1 </dev/null &
    ctld_pid=$!
    "$SLURMD" -D -N "$node" >"$work/log/slurmd.out" 2>&1 </dev/null &
    slurmd_pid=$!

    local deadline=$(( SECONDS + startup_timeout )) state="" name pid left
    while (( SECONDS < deadline )); do
        for name in slurmctld slurmd; do
            if [[ $name == slurmctld ]]; then pid=$ctld_pid; else pid=$slurmd_pid; fi
            alive "$pid" && continue
            if grep -qs 'Address already in use' "$work/log/$name.out" "$work/log/$name.log"; then
                return 1
            fi
            fail "$name exited during startup" "$work/log/$name.out"
        done
        left=$(( deadline - SECONDS )); (( left > 5 )) && left=5; (( left < 1 )) && left=1
        state=$("$TIMEOUT" "$left" "$SINFO" -h -N -n "$node" -o '%T' 2>/dev/null | head -n 1)
        [[ $state == idle ]] && return 0
        sleep 0.2
    done
    fail "node $node not idle after ${startup_timeout} s (sinfo state: '${state:-no answer}')" \
        "$work/log/slurmctld.out" "$work/log/slurmd.out"
}

up=0
for (( attempt = 1; attempt <= 3; attempt++ )); do
    read_used_ports
    ctld_port=$(pick_port) || fail "no free TCP port found"
    slurmd_port=$(pick_port "$ctld_port") || fail "no free TCP port found"
    write_conf || fail "cannot write $SLURM_CONF"
    start_slurm && { up=1; break; }
    echo "$prog: port $ctld_port or $slurmd_port was taken, retrying with other ports" >&2
    stop_pid "$slurmd_pid" 5; stop_pid "$ctld_pid" 5
    kill_leftovers
    slurmd_pid="" ctld_pid=""
done
(( up )) || fail "slurm daemons could not bind free ports after 3 attempts" \
    "$work/log/slurmctld.out" "$work/log/slurmd.out"

# --------------------------------------------------------------------- srun --
srun_args=(--ntasks="$ntasks" --nodes=1 --job-name=slurm_one_node)
# More tasks than CPUs would stay pending forever without --overcommit.
(( ntasks > cpus )) && srun_args+=(--overcommit)

start=$SECONDS
# Background + wait so INT/TERM are handled at once; stdin passed explicitly
# (a non-interactive '&' would otherwise get /dev/null).  --foreground keeps
# srun in the caller's process group; srun has no local children to leak.
"$TIMEOUT" --foreground -k 10 "$run_timeout" "$SRUN" "${srun_args[@]}" -- "$@" <&0 &
srun_pid=$!
wait "$srun_pid"
rc=$?
srun_pid=""
if (( rc == 124 || rc == 137 )) && (( SECONDS - start >= run_timeout )); then
    echo "$prog: srun timed out after ${run_timeout} s" >&2
    rc=124
fi
exit "$rc"
