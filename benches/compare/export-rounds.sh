#!/usr/bin/env bash
# Per-connection exports against librpma's shared region: interleaved rounds
# (the order reversed every other round) of the compare bench's
# `xserver` / `xclient` pair, N connections, M reads each.
#
#   cargo bench --bench compare --no-run
#   harness/rdma-run benches/compare/export-rounds.sh [N] [M] [BENCH-BINARY]
set -euo pipefail
n=${1:-16} m=${2:-500}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${3:-$(ls -t "${CARGO_TARGET_DIR:-$here/target}"/release/deps/compare-* | grep -v '\.d$' | head -1)}
[ -n "${RPMA_TEST_ADDR:-}" ] || { echo "export-rounds: run it through harness/rdma-run" >&2; exit 2; }
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
port=${RPMA_TEST_PORT:-8100}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in 1 2 3 4; do
  if [ $((round % 2)) = 1 ]; then modes="shared export"; else modes="export shared"; fi
  for mode in $modes; do
    port=$((port + 1))
    "$bin" xserver "$RPMA_TEST_ADDR" $port "$n" $mode > "$out" 2>&1 &
    for _ in $(seq 1 200); do grep -q READY "$out" && break; sleep 0.1; done
    "$bin" xclient "$RPMA_TEST_ADDR" $port "$n" "$m" $mode | grep RESULT | sed "s/^/round $round client: /"
    wait
    grep RESULT "$out" | sed "s/^/round $round server: /" || true
  done
done
