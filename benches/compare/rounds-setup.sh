# Sourced by the rounds scripts (scale-rounds.sh, conn-rounds.sh), run
# inside the harness's VM: sets $bin (the compare bench's newest build, or
# RPMA_BENCH_BIN), $cbin (the C program, built here against Debian's
# librpma into $tmp, which is removed on exit) and $on0 / $on1 (the
# server's and the client's pinning to vCPU 0 and 1; RPMA_BENCH_PIN=0
# leaves them to the scheduler). Needs $here (the repository) and $name
# (the script's, for its messages).
bin=${RPMA_BENCH_BIN:-$(ls -t "${CARGO_TARGET_DIR:-$here/target}"/release/deps/compare-* | grep -v '\.d$' | head -1)}
[ -n "${RPMA_TEST_ADDR:-}" ] || { echo "$name: run it through harness/rdma-run" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cbin=$tmp/librpma_bench
gcc -O2 -o "$cbin" "$here/benches/compare/librpma_bench.c" -lrpma -libverbs
on0=() on1=()
if [ "${RPMA_BENCH_PIN:-1}" != 0 ] && [ "$(nproc)" -ge 2 ]; then on0=(taskset -c 0) on1=(taskset -c 1); fi
