#!/usr/bin/env bash
# Two builds of the library that differ in compiler flags (a kernel
# variant behind a macro) or in their source trees (a commit against the
# working tree), timed against each other on one GPU (or the CPU) in one
# call:
# both builds of flashc_bench, then ROUNDS rounds of the same flashc_bench
# arguments on each, the order of the two turned every round (the card's
# clocks drift over a minute; a fixed order would put the drift in the
# ratio). From the repository root, with $OUT a folder whose files come back:
#
#   VARIANT_FLAGS="-DFLASHC_MY_VARIANT=1" BENCH_ENV="FLASHC_CUDA_FORWARD=portable" \
#     bash bench/build_ab.sh --hdim 64,128,256 --seqlen 2048,8192 --causal 0,1 --forward-only --repeat 20
#
# The arguments are flashc_bench's (--device and --tsv are added).
# Writes $OUT/build_ab_runs.tsv (every row, prefixed by round and build)
# and $OUT/build_ab.tsv (per shape and pass: the median TFLOP/s, or
# GFLOP/s on the CPU, of each build over the rounds, and variant / base),
# and prints the latter with the geometric mean.
#
# Environment:
#   VARIANT_FLAGS  nvcc flags of the variant build (C compiler flags with
#                  DEVICE=cpu; required unless BASE_SRC is set)
#   BASE_FLAGS     the base build's (default none)
#   BASE_SRC       the base build's source tree (default the repository;
#                  e.g. `git worktree add /tmp/base HEAD` to time the
#                  working tree's changes against HEAD)
#   DEVICE         cuda (default) or cpu: a CPU-only build, timed on the CPU
#   BENCH_ENV      variables set for both builds' runs, split at spaces
#   BASE_ENV, VARIANT_ENV  variables for one build's runs only (e.g. a
#                  run-time choice that only the variant build reads)
#   ROUNDS         rounds (default 2)
#   CUDA_ARCHS     CMAKE_CUDA_ARCHITECTURES (default 90-real)
#   JOBS           build parallelism (default 16)
#   AB_DIR         where the two builds go (default build-ab-builds; carry
#                  it to reuse them)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ -n "${BASE_SRC:-}" ] || : "${VARIANT_FLAGS:?set VARIANT_FLAGS (compiler flags of the variant build) or BASE_SRC}"
VARIANT_FLAGS="${VARIANT_FLAGS:-}"
DEVICE="${DEVICE:-cuda}"
OUT="${OUT:-$ROOT/build-ab-out}"
AB_DIR="${AB_DIR:-$ROOT/build-ab-builds}"
ROUNDS="${ROUNDS:-2}"
mkdir -p "$OUT" "$AB_DIR"
read -r -a bench_env <<< "${BENCH_ENV:-}"
read -r -a base_env <<< "${BASE_ENV:-}"
read -r -a variant_env <<< "${VARIANT_ENV:-}"

build() { # name, compiler flags, source tree
    local dir="$AB_DIR/$1" flags=(-DFLASHC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90-real}"
                                   -DCMAKE_CUDA_FLAGS="$2")
    [ "$DEVICE" = cpu ] && flags=(-DFLASHC_CUDA=OFF -DCMAKE_C_FLAGS="$2")
    cmake -S "$3" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DFLASHC_BUILD_TESTS=OFF "${flags[@]}" > "$OUT/build_$1.log" 2>&1
    cmake --build "$dir" -j "${JOBS:-16}" --target flashc_bench >> "$OUT/build_$1.log" 2>&1
}

run() { # round, name
    local own=("${base_env[@]}")
    [ "$2" = variant ] && own=("${variant_env[@]}")
    env "${bench_env[@]}" "${own[@]}" "$AB_DIR/$2/flashc_bench" --device "$DEVICE" --tsv "${@:3}" 2>&1 |
        awk -v r="$1" -v b="$2" '{print r "\t" b "\t" $0}' >> "$OUT/build_ab_runs.tsv"
}

start=$(date +%s)
build base "${BASE_FLAGS:-}" "${BASE_SRC:-.}"
build variant "$VARIANT_FLAGS" .
echo "# builds: $(($(date +%s) - start)) s; base flags '${BASE_FLAGS:-}', variant flags '$VARIANT_FLAGS';" \
    "base source ${BASE_SRC:-.};" \
    "env: both '${BENCH_ENV:-}', base '${BASE_ENV:-}', variant '${VARIANT_ENV:-}'"
: > "$OUT/build_ab_runs.tsv"
for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then order="base variant"; else order="variant base"; fi
    for name in $order; do run "$round" "$name" "$@"; done
done

python3 - "$OUT/build_ab_runs.tsv" "$OUT/build_ab.tsv" <<'EOF'
import math
import statistics
import sys

KEYS = ("hdim", "seqlen", "batch", "heads", "dtype", "threads", "causal")
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
    key = tuple(rec.get(k, "-") for k in KEYS)
    for what in ("fwd", "bwd"):  # TFLOP/s on the GPU, GFLOP/s on the CPU
        value = float(rec.get(what + "_tflops", rec.get(what + "_gflops", "nan")))
        if value > 0:
            rows.setdefault((key, what), {}).setdefault(cols[1], []).append(value)

out = open(sys.argv[2], "w")
print("\t".join(KEYS) + "\tpass\tbase_flops\tvariant_flops\tvariant/base", file=out)
ratios = []
for (key, what), by in rows.items():
    if "base" not in by or "variant" not in by:
        continue
    base, variant = statistics.median(by["base"]), statistics.median(by["variant"])
    ratios.append(variant / base)
    print("\t".join(key) + f"\t{what}\t{base:.1f}\t{variant:.1f}\t{variant / base:.3f}", file=out)
out.close()
print(open(sys.argv[2]).read(), end="")
if ratios:
    print(f"# geometric mean variant/base over {len(ratios)} rows: "
          f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.4f}")
else:
    print("# no rows timed by both builds: see build_*.log and build_ab_runs.tsv")
    sys.exit(1)
EOF
