#!/usr/bin/env bash
# bench/netcluster: ranks run in network namespaces of their own (none is the test's), a link
# limited to 100 Mbit/s delivers 60%..105% of that to MPI (so the limit is real), the
# environment reaches the ranks, a failing program's status comes back, and after a normal run,
# a failed one and a TERM nothing it created is left: no namespace, link, bridge, process or
# temporary file. Needs root (network namespaces); says SKIPPED otherwise.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rm -rf "$WORK"; mkdir -p "$WORK/tmp"; cd "$WORK" || exit 1
NC="$SRC/bench/netcluster"
PROBE="$BUILD/tests/net_probe"
export TMPDIR="$WORK/tmp" OMP_NUM_THREADS=1
fail=0
die() { echo "FAILED: $*"; exit 1; }
bad() { echo "FAILED: $*"; fail=1; }

if [ "$(id -u)" != 0 ]; then echo "SKIPPED: bench/netcluster needs root"; exit 0; fi
[ -x "$PROBE" ] || die "$PROBE not built"

# Name prefixes of this test's clusters; whatever netcluster fails to remove is removed here.
tag=t$(printf '%04x' $((RANDOM % 65536)))
netns_names() { ip netns list | awk '{ print $1 }'; }
link_names() { ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'; }
# leftovers PREFIX: the namespaces (PREFIXh<i>) and links (PREFIXbr, PREFIXh<i>r) of cluster PREFIX
leftovers() { { netns_names; link_names; } | grep -E "^$1(br|h[0-9]+r?)\$" | tr '\n' ' '; }
cleanup_all() {
  local n
  for n in $(netns_names | grep -E "^${tag}[a-d]h[0-9]+\$"); do
    ip netns pids "$n" | xargs -r kill -9 2>/dev/null; ip netns del "$n"
  done
  for n in $(link_names | grep -E "^${tag}[a-d](br|h[0-9]+r)\$"); do ip link del "$n"; done
}
trap cleanup_all EXIT
# check_clean PREFIX WHAT: nothing named PREFIX*, no process started from this test's temporary
# directory (the daemons' command lines name the agent there), the directory empty
check_clean() {
  local left procs
  left=$(leftovers "$1")
  [ -z "$left" ] || bad "$2: left behind: $left"
  procs=$(ps -eo pid=,args= | grep -F "$WORK/tmp" | grep -v grep)
  [ -z "$procs" ] || bad "$2: processes left: $procs"
  [ -z "$(ls -A "$WORK/tmp")" ] || bad "$2: temporary files left: $(ls -A "$WORK/tmp")"
}

# ---- 3 hosts at 100 Mbit/s: namespaces and bandwidth
t0=$SECONDS
bash "$NC" --name "${tag}a" --hosts 3 --rate 100mbit -- "$PROBE" 3000000 3 > probe.log 2>&1
rc=$?
cat probe.log
[ $rc -eq 0 ] || bad "net_probe under netcluster exited $rc"
mine=$(readlink /proc/self/ns/net)
mapfile -t ns < <(awk '$1 == "netns" { print $4 }' probe.log)
[ ${#ns[@]} -eq 3 ] || bad "expected 3 ranks' namespaces, got ${#ns[@]}"
[ "$(printf '%s\n' "${ns[@]}" | sort -u | wc -l)" -eq 3 ] || bad "ranks share a namespace: ${ns[*]}"
for n in "${ns[@]}"; do [ "$n" != "$mine" ] || bad "a rank runs in the test's own namespace $mine"; done
mbit=$(awk '/^bandwidth median/ { print $5 }' probe.log)
[ -n "$mbit" ] || bad "no bandwidth line"
awk -v m="${mbit:-0}" 'BEGIN { exit !(m >= 60 && m <= 105) }' ||
  bad "bandwidth $mbit Mbit/s at --rate 100mbit is outside [60, 105]"
echo "100mbit link: $mbit Mbit/s of MPI payload ($((SECONDS - t0)) s)"
check_clean "${tag}a" "normal run"

# ---- a failing program: its status comes back, the environment reached it, all cleaned up
bash "$NC" --name "${tag}b" --env MY_VAR -- sh -c 'exit 3' > fail.log 2>&1
rc=$?
[ $rc -eq 3 ] || bad "a program exiting 3 made netcluster exit $rc, not 3"
grep -q "warning: --env MY_VAR is not set" fail.log || bad "no warning for an unset --env variable"
MY_VAR=hello bash "$NC" --name "${tag}c" --env MY_VAR -- \
    sh -c 'echo "rank $OMPI_COMM_WORLD_RANK host $NETCLUSTER_HOST omp $OMP_NUM_THREADS var $MY_VAR"; exit 3' \
    > fail.log 2>&1
rc=$?
cat fail.log
[ $rc -eq 3 ] || bad "a program exiting 3 made netcluster exit $rc, not 3"
grep -Eq "^rank [01] host ${tag}ch[01] omp 1 var hello$" fail.log ||
  bad "OMP_NUM_THREADS / --env MY_VAR / NETCLUSTER_HOST did not reach the ranks"
check_clean "${tag}b" "failed run, --env unset"
check_clean "${tag}c" "failed run"

# ---- TERM while the program runs: netcluster ends soon, non-zero, and cleans up
nap=59.$$   # a sleep whose command line is this test's own
bash "$NC" --name "${tag}d" -- sleep $nap > term.log 2>&1 &
job=$!
for _ in $(seq 100); do [ "$(pgrep -cf "^sleep $nap\$")" -ge 2 ] && break; sleep 0.1; done
[ "$(pgrep -f "^sleep $nap\$" | wc -l)" -eq 2 ] || bad "sleep did not start on 2 hosts: $(cat term.log)"
kill -TERM $job
t0=$SECONDS
while kill -0 $job 2>/dev/null && [ $((SECONDS - t0)) -lt 20 ]; do sleep 0.2; done
if kill -0 $job 2>/dev/null; then bad "netcluster still running 20 s after TERM"; kill -9 $job; fi
wait $job; rc=$?
[ $rc -ne 0 ] || bad "netcluster exited 0 after TERM"
cat term.log
procs=$(pgrep -af "^sleep $nap\$")
[ -z "$procs" ] || bad "TERM: the program is still running: $procs"
check_clean "${tag}d" "TERM"
echo "TERM: netcluster exited $rc after $((SECONDS - t0)) s"

[ $fail -eq 0 ] && echo "netcluster: all checks passed"
exit $fail
