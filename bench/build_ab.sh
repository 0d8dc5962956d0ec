#!/usr/bin/env bash
# Two builds of the CUDA library that differ only in nvcc flags (a kernel
# variant behind a macro), timed against each other on one GPU in one call:
# both builds of flashc_bench, then ROUNDS rounds of the same flashc_bench
# arguments on each, the order of the two turned every round (the card's
# clocks drift over a minute; a fixed order would put the drift in the
# ratio). From the repository root, with $OUT a folder whose files come back:
#
#   VARIANT_FLAGS="-DFLASHC_TAIL_RAMP=3" BENCH_ENV="FLASHC_CUDA_FORWARD=portable" \
#     bash bench/build_ab.sh --hdim 64,128,256 --seqlen 2048,8192 --causal 0,1 --forward-only --repeat 20
#
# The arguments are flashc_bench's (--device cuda and --tsv are added).
# Writes $OUT/build_ab_runs.tsv (every row, prefixed by round and build)
# and $OUT/build_ab.tsv (per shape: the median TFLOP/s of each build over
# the rounds and variant / base), and prints the latter with the
# geometric mean.
#
# Environment:
#   VARIANT_FLAGS  nvcc flags of the variant build (required)
#   BASE_FLAGS     nvcc flags of the base build (default none)
#   BENCH_ENV      variables set for both builds' runs, split at spaces
#   ROUNDS         rounds (default 2)
#   CUDA_ARCHS     CMAKE_CUDA_ARCHITECTURES (default 90-real)
#   JOBS           build parallelism (default 16)
#   AB_DIR         where the two builds go (default build-ab-builds; carry
#                  it to reuse them)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
: "${VARIANT_FLAGS:?set VARIANT_FLAGS: the nvcc flags of the variant build}"
OUT="${OUT:-$ROOT/build-ab-out}"
AB_DIR="${AB_DIR:-$ROOT/build-ab-builds}"
ROUNDS="${ROUNDS:-2}"
mkdir -p "$OUT" "$AB_DIR"
read -r -a bench_env <<< "${BENCH_ENV:-}"

build() { # name, nvcc flags
    local dir="$AB_DIR/$1"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DFLASHC_CUDA=ON -DFLASHC_BUILD_TESTS=OFF \
        -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90-real}" -DCMAKE_CUDA_FLAGS="$2" > "$OUT/build_$1.log" 2>&1
    cmake --build "$dir" -j "${JOBS:-16}" --target flashc_bench >> "$OUT/build_$1.log" 2>&1
}

run() { # round, name
    env "${bench_env[@]}" "$AB_DIR/$2/flashc_bench" --device cuda --tsv "${@:3}" 2>&1 |
        awk -v r="$1" -v b="$2" '{print r "\t" b "\t" $0}' >> "$OUT/build_ab_runs.tsv"
}

start=$(date +%s)
build base "${BASE_FLAGS:-}"
build variant "$VARIANT_FLAGS"
echo "# builds: $(($(date +%s) - start)) s; base flags '${BASE_FLAGS:-}', variant flags '$VARIANT_FLAGS'"
: > "$OUT/build_ab_runs.tsv"
for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then order="base variant"; else order="variant base"; fi
    for name in $order; do run "$round" "$name" "$@"; done
done

python3 - "$OUT/build_ab_runs.tsv" "$OUT/build_ab.tsv" <<'EOF'
import math
import statistics
import sys

header, rows = None, {}
for line in open(sys.argv[1]):
    cols = line.rstrip("\n").split("\t")
    if len(cols) < 4 or cols[2].startswith(("#", "[")):
        continue
    if cols[2] == "hdim":
        header = cols[2:]
        continue
    if header is None:
        continue
    rec = dict(zip(header, cols[2:]))
    key = tuple(rec[k] for k in ("hdim", "seqlen", "batch", "heads", "dtype", "causal"))
    for what in ("fwd_tflops", "bwd_tflops"):
        value = float(rec.get(what, "nan"))
        if not math.isnan(value):
            rows.setdefault((key, what), {}).setdefault(cols[1], []).append(value)

out = open(sys.argv[2], "w")
print("hdim\tseqlen\tbatch\theads\tdtype\tcausal\tpass\tbase_tflops\tvariant_tflops\tvariant/base", file=out)
ratios = []
for (key, what), by in rows.items():
    if "base" not in by or "variant" not in by:
        continue
    base, variant = statistics.median(by["base"]), statistics.median(by["variant"])
    ratios.append(variant / base)
    print("\t".join(key) + f"\t{what[:3]}\t{base:.1f}\t{variant:.1f}\t{variant / base:.3f}", file=out)
out.close()
print(open(sys.argv[2]).read(), end="")
if ratios:
    print(f"# geometric mean variant/base over {len(ratios)} rows: "
          f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.4f}")
else:
    print("# no rows timed by both builds: see build_*.log and build_ab_runs.tsv")
    sys.exit(1)
EOF
