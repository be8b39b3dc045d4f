#!/usr/bin/env bash
# The benches' loaded mode for a rounds script: starts RPMA_BENCH_LOAD
# threads spinning on the host, runs SCRIPT ARGS through harness/rdma-run
# beside them (the VM shares the host's cores with them), and stops them.
#
#   RPMA_BENCH_LOAD=2 benches/compare/loaded.sh benches/compare/scale-rounds.sh 8 16000 64 256 > OUT
#
# (conn-rounds.sh and scale-rounds.sh call it for their --host option.)
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
hogs=()
trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
for _ in $(seq 1 "${RPMA_BENCH_LOAD:-0}"); do
    (while :; do :; done) &
    hogs+=("$!")
done
echo "loaded: ${#hogs[@]} spinning host thread(s) beside the VM" >&2
"$here/harness/rdma-run" "$@"
