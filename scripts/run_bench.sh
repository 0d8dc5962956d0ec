#!/usr/bin/env bash
# Run flashc_bench and print a Markdown block for bench/RESULTS.md: date,
# device, compiler and tool versions, commit, the exact command and its
# output. Usage: scripts/run_bench.sh BUILD_DIR [flashc_bench options...]
set -euo pipefail
build="${1:?usage: scripts/run_bench.sh BUILD_DIR [flashc_bench options]}"
shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench="$build/flashc_bench"
[ -x "$bench" ] || { echo "run_bench.sh: $bench not found (build the flashc_bench target)" >&2; exit 1; }
compiler="$(grep -E '^CMAKE_C_COMPILER:' "$build/CMakeCache.txt" | cut -d= -f2)"
build_type="$(grep -E '^CMAKE_BUILD_TYPE:' "$build/CMakeCache.txt" | cut -d= -f2)"
echo "### $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "- device: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs"\
     "($(lscpu | grep -o 'avx512f\|avx512_bf16\|amx_tile' | sort -u | tr '\n' ' '| sed 's/ $//'))"
echo "- compiler: $("$compiler" --version | head -1) ($build_type); $(cmake --version | head -1)"
echo "- flashc: $(git -C "$root" rev-parse --short HEAD) ($(git -C "$root" log -1 --format=%s | cut -c1-80))"
echo "- load: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15-min load average before the run)"
echo "- command: \`$bench $*\`"
echo
echo '```'
"$bench" "$@"
echo '```'
