#!/usr/bin/env bash
# Runs test binaries of the executor, the MLX shim, the hostile-input, concurrency and
# random-graph tests under valgrind's memcheck (Debian: apt-get install valgrind). A binary
# fails on any memory error or any definite or indirect leak. Rust's std keeps one `Thread`
# record per test thread alive at exit, which memcheck lists as "possibly lost"; those are
# not ours and are not counted. The hostile text test is skipped: it runs MiniLM, minutes
# under valgrind. The random-graph test runs the CPU's baseline kernels: under valgrind's
# emulation of AVX2 a float64 `sign` of NaN gave -1 (natively it gives NaN on every path,
# which the same test checks outside valgrind), and that test compares values exactly.
#
#   scripts/valgrind-check.sh [TEST...]     (default: the list below)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind-check: install valgrind first" >&2; exit 2; }

tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(planner no_alloc run_errors mlx_handles mlx mlx_device hostile concurrency fuzz)

# The test binaries, built as `cargo test` builds them; their paths from cargo's report.
binaries=$(cargo test --no-run --message-format=json "${tests[@]/#/--test=}" 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])')

status=0
while read -r name exe; do
  log=$(mktemp)
  isa=${RLX_CPU_ISA:-}
  [ "$name" = fuzz ] && isa=baseline
  if RLX_CPU_ISA=$isa valgrind --error-exitcode=9 --leak-check=full \
      --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
      "$exe" --test-threads=1 --skip text:: >"$log" 2>&1; then
    verdict=clean
  else
    verdict="FAILED (log: $log)"
    status=1
  fi
  summary=$(grep -E "ERROR SUMMARY" "$log" | tail -1 | sed 's/==[0-9]*== //')
  lost=$(grep -E "definitely lost|indirectly lost" "$log" | tail -2 | sed 's/==[0-9]*== *//' | tr '\n' ';')
  echo "valgrind $name: $verdict; $summary; $lost"
  [ "$verdict" = clean ] && rm -f "$log"
done <<<"$binaries"
exit $status
