#!/usr/bin/env bash
# Many connections on one thread: interleaved rounds (the order reversed
# every other round) of C librpma's and rpma's per-connection CQs (one epoll
# loop, `scch`) and rpma's `SharedCq` (`scq`), each connection keeping one
# 8-byte read in flight, about TOTAL reads per run. Prints each run's rate
# and each client's resident set once its connections are up (INFO-MEM,
# KiB) and how often it slept waiting for completions (INFO-SLEEPS).
# RPMA_SCALE_RUNS picks the clients (default "c:scch rust:scch rust:scq";
# also rust:scrr, per-connection CQs polled round robin, rust:aio, and
# rust:aiob, the same tasks on bare tokio: blocking posts, own CQ polls).
# The server runs on vCPU 0 and the client on vCPU 1 (as in the compare
# bench; RPMA_BENCH_PIN=0 leaves them to the scheduler).
#
#   cargo bench --bench compare --no-run
#   harness/rdma-run benches/compare/scale-rounds.sh [ROUNDS] [TOTAL] [N...] > OUT
#   target/release/deps/compare-HASH rounds OUT [BASE]   # medians, ratios to BASE
#
# Loaded: the same with threads spinning on the host beside the VM, e.g.
#   RPMA_BENCH_LOAD=2 benches/compare/scale-rounds.sh --host [ROUNDS] [TOTAL] [N...] > OUT
# (--host starts them, then runs the rounds through harness/rdma-run.)
#
# (`rounds`: each client's median rate, and against BASE, default `rpma`,
# the median of the per-round ratios, their range and a 95% interval of
# that median, from the rounds resampled.)
set -euo pipefail
if [ "${1:-}" = --host ]; then
    shift
    exec "$(dirname "${BASH_SOURCE[0]}")/loaded.sh" "$0" "$@"
fi
rounds=${1:-4} total=${2:-8000}
shift $(( $# < 2 ? $# : 2 ))
ns=${*:-16 64 256 1024}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
name=scale-rounds
# shellcheck source=benches/compare/rounds-setup.sh
. "$here/benches/compare/rounds-setup.sh"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
port=${RPMA_TEST_PORT:-8300}
for round in $(seq 1 "$rounds"); do
  for n in $ns; do
    each=$(( total / n )); [ "$each" -ge 2 ] || each=2
    runs=${RPMA_SCALE_RUNS:-c:scch rust:scch rust:scq}
    [ $((round % 2)) = 1 ] || runs=$(echo "$runs" | tr ' ' '\n' | tac | tr '\n' ' ')
    for run in $runs; do
      prog=$bin; [ "${run%%:*}" = c ] && prog=$cbin
      port=$((port + 1))
      "${on0[@]}" "$prog" mserver "$RPMA_TEST_ADDR" $port "$n" > "$tmp/server" 2>&1 &
      for _ in $(seq 1 300); do grep -q READY "$tmp/server" && break; sleep 0.1; done
      "${on1[@]}" "$prog" "${run#*:}" "$RPMA_TEST_ADDR" $port "$n" "$each" | grep -E '^(RESULT|INFO-MEM|INFO-SLEEPS)' | sed "s/^/round $round n $n: /"
      wait
    done
  done
done
