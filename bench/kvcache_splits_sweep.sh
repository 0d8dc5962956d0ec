#!/usr/bin/env bash
# kvcache_splits_sweep.sh: the decode's key-split count swept on a GPU,
# each shape's counts timed one after another in kvcache_bench processes,
# ROUNDS rounds with the order turned (a card's clocks drift over a
# minute; a fixed order would put the drift in the ratios), then per shape
# the median µs of every count and of the library's own choice (0).
#
#   bash bench/kvcache_splits_sweep.sh BUILD_DIR "KV_HEADS,BATCH,CACHE:N,N,.." ...
#   e.g. bash bench/kvcache_splits_sweep.sh build-gpu "8,1,131072:16,32" "32,1,131072:4,8"
#
# Environment: ROUNDS (default 2), LAYOUTS (kvcache_bench --layouts,
# default 0: contiguous), KERNEL (FLASHC_CUDA_KVCACHE for every run, e.g.
# wide), OUT (where rows.txt goes; default a temporary folder).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
bench="$1/kvcache_bench"; shift
[ -x "$bench" ] || { echo "kvcache_splits_sweep: no $bench (build the kvcache_bench target)" >&2; exit 2; }
out="${OUT:-$(mktemp -d)}"; rows="$out/kvcache_splits_rows.txt"; : > "$rows"
[ -n "${KERNEL:-}" ] && export FLASHC_CUDA_KVCACHE="$KERNEL"
for spec in "$@"; do
    shape="${spec%%:*}"; counts="0,${spec#*:}"
    for round in $(seq 1 "${ROUNDS:-2}"); do
        list="${counts//,/ }"
        [ $((round % 2)) = 0 ] && list="$(echo $list | tr ' ' '\n' | tac | tr '\n' ' ')"
        for n in $list; do
            "$bench" --shape "$shape" --layouts "${LAYOUTS:-0}" --splits "$n" | grep '^| [0-9]' |
                sed "s/^/$shape $n /" >> "$rows" || true # no rows: no GPU here, or the run failed
        done
    done
done
python3 - "$rows" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(list)
for line in open(sys.argv[1]):
    shape, asked, row = line.split(" ", 2)
    f = [x.strip() for x in row.strip().strip("|").split("|")]
    # asked 0: the library's choice, whose count is the row's splits column
    times[(shape, f[1], int(asked), int(f[5]))].append(float(f[6]))
print("| shape (KV heads, batch, cache) | layout | splits | us / call (median) | / library's choice |")
print("| --- | --- | --- | --- | --- |")
for shape, layout in dict.fromkeys((k[0], k[1]) for k in times):
    mine = [statistics.median(v) for k, v in times.items() if k[:2] == (shape, layout) and k[2] == 0]
    for (s, l, asked, got), v in sorted(times.items(), key=lambda kv: (kv[0][2] != 0, kv[0][3])):
        if (s, l) != (shape, layout):
            continue
        t = statistics.median(v)
        name = f"{got} (library)" if asked == 0 else str(got)
        ratio = f"{t / mine[0]:.3f}" if mine else "-"
        print(f"| {shape} | {layout} | {name} | {t:.1f} | {ratio} |")
PY
echo "rows: $rows" >&2
