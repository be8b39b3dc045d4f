#!/usr/bin/env bash
# Connection set-up and tear-down: interleaved rounds (the order reversed
# every other round) of C librpma's and rpma's clients connecting N times in
# a row to their own server, each connection sending one message and
# disconnecting (the `conns` case of the compare bench). Prints each run's
# rate. The server runs on vCPU 0 and the client on vCPU 1, as in the
# compare bench (RPMA_BENCH_PIN=0 leaves them to the scheduler).
#
#   cargo bench --bench compare --no-run
#   harness/rdma-run benches/compare/conn-rounds.sh [ROUNDS] [N]
#
# Loaded: the same with threads spinning on the host beside the VM, e.g.
#   RPMA_BENCH_LOAD=2 benches/compare/conn-rounds.sh --host [ROUNDS] [N]
# (--host starts them, then runs the rounds through harness/rdma-run.)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ "${1:-}" = --host ]; then
    shift
    exec "$(dirname "${BASH_SOURCE[0]}")/loaded.sh" "$0" "$@"
fi
rounds=${1:-6} n=${2:-200}
name=conn-rounds
# shellcheck source=benches/compare/rounds-setup.sh
. "$here/benches/compare/rounds-setup.sh"
port=${RPMA_TEST_PORT:-8600}
for round in $(seq 1 "$rounds"); do
    progs="$cbin $bin"
    [ $((round % 2)) = 1 ] || progs="$bin $cbin"
    for prog in $progs; do
        port=$((port + 1))
        "${on0[@]}" "$prog" server "$RPMA_TEST_ADDR" $port "$n" > "$tmp/server" 2>&1 &
        for _ in $(seq 1 300); do grep -q READY "$tmp/server" && break; sleep 0.1; done
        "${on1[@]}" "$prog" conns "$RPMA_TEST_ADDR" $port "$n" | grep -E '^RESULT' | sed "s/^/round $round: /"
        wait
    done
done
