#!/usr/bin/env bash
# shellcheck disable=SC2317  # the step functions are called as "step_$step"
# The GPU check of flashc: one run on a GPU machine, from the repository
# root, with $OUT an empty folder whose files come back (at most 8):
#
#   build     Release build with the CUDA backend; ptxas -v resource usage
#             (registers, shared memory, stack, spills) in build.log
#   ctest     every C test (test_cuda_forward's suite once more on the
#             portable kernel among them), test_cuda_forward and
#             test_cuda_backward (quick mode) with their output,
#             test_cuda_kvcache again on the
#             portable kernel and on the Hopper wide kernel (quick), the portable kernels under the
#             shared memory of an sm_86 / sm_89 part (FLASHC_CUDA_SMEM_LIMIT),
#             the portable backward under an A100's and its GQA head splits,
#             and a default `flashc run` (GPU)
#             checked against the reference: ctest.log
#   sanitize  compute-sanitizer memcheck on test_cuda_forward (quick grid,
#             default kernels and the portable ones), on test_cuda_kvcache
#             and on small `flashc run`s (one with the portable backward);
#             racecheck on small `flashc run` problems that reach each
#             kernel family (the portable backward's configurations and
#             variants too, forced) and on KV-cache tests
#             (paged, masks, bad indices): sanitize.log
#   sass      cuobjdump --dump-sass of libflashc.so: HMMA/HGMMA count per
#             kernel, LDL/STL (local memory) in the forward kernels: sass.txt
#   pytest    the Python package (pip install, reusing the build above; the
#             built library through FLASHC_LIBRARY if that fails), then
#             pytest tests/python on CUDA: pytest.log
#   bench     `flashc bench --quick` (the C benchmark on the GPU), the
#             backward's deterministic cost (`flashc bench` with and without
#             --deterministic at seqlen 2048 and 16384),
#             bench/gpu_sdpa_bench.py against PyTorch SDPA flash and cudnn
#             and bench/percall_bench.py (per-call cost): bench.log, bench.tsv
# and summary.txt, the table printed last. Two more steps, not in the
# default list, for work on the KV cache alone:
#   kvcache   test_cuda_kvcache on the default kernels (full), on the wide,
#             the tall (64- and 128-key steps), the portable and the TMA
#             ones (the last takes head dims that are not a multiple of 64
#             too, unpaired), as head pairs wherever the shape allows
#             (head dims 32 and 96), with the append kernel before the
#             attention instead of the Hopper kernel's own (kernel_append: the attention reading
#             the older rows before the append ends; serial_append: nothing)
#             and under memcheck (quick), side by side, and
#             pytest -k "cuda and (kvcache or paged)": kvcache.log
#   decode    the decode benchmarks: bench/kvcache_peers.py (flashc,
#             cuDNN, SDPA flash, and FlashAttention-4 where importable:
#             run `eval "$(bash .peers/b/fa4.sh stage-b)"` first, see
#             ../shared/peers/fa4.sh) into decode_peers.tsv, the model
#             shapes of bench/kvcache_models_peers.py into
#             decode_models.tsv, then
#             kvcache_bench --shape for DECODE_ROWS (KV_HEADS,BATCH,CACHE
#             ...; a default set) and --append for DECODE_APPEND_ROWS (what
#             the append and rotary add) into decode_rows.md
# e.g. GPU_STEPS="build kvcache decode" CUDA_ARCHS=90-real (about 3 minutes).
#
# Environment:
#   GPU_STEPS    steps to run, in this order (default: all of the above)
#   BENCH_ARGS   arguments of gpu_sdpa_bench.py (default: the full grid;
#                e.g. "--quick" or "--hdim 128 --seqlen 4096")
#   PYTEST_ARGS  pytest arguments, split at spaces (default "-k cuda": the
#                CUDA tests; set it empty for the whole suite)
#   CUDA_ARCHS   CMAKE_CUDA_ARCHITECTURES (default: the project's choice)
#   CUDA_FLAGS   nvcc flags added to -Xptxas=-v (e.g. a kernel variant's
#                macro; use its own BUILD_DIR)
#   JOBS         build parallelism (16); BUILD_DIR (build-gpu)
#   DEADLINE_S   seconds the whole run may take (560): each step is cut
#                to what is left, so the logs come back within the call
#
# The GPU machine has no package registry. The C tests need cmocka: run
#   bash scripts/gpu_check.sh prepare
# once on a machine that has it (Debian: libcmocka-dev): it copies the
# header and library into build-gpu-deps/, which the GPU call must carry.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
DEPS="$ROOT/build-gpu-deps"

if [ "${1:-}" = "prepare" ]; then
    header="$(echo '#include <cmocka.h>' | cpp -H -x c - 2>&1 >/dev/null | grep -m1 'cmocka.h' | awk '{print $2}')"
    lib="$(ldconfig -p | awk '/libcmocka\.so\.0 / {print $NF; exit}')"
    if [ -z "$header" ] || [ -z "$lib" ]; then
        echo "gpu_check prepare: cmocka not found here (Debian: apt-get install libcmocka-dev)" >&2
        exit 1
    fi
    rm -rf "$DEPS" && mkdir -p "$DEPS/cmocka/include" "$DEPS/cmocka/lib"
    cp "$header" "$DEPS/cmocka/include/"
    cp -L "$lib" "$DEPS/cmocka/lib/libcmocka.so.0"
    cp -L "$lib" "$DEPS/cmocka/lib/libcmocka.so"  # copies: links may not travel
    echo "gpu_check prepare: cmocka copied to $DEPS (carry build-gpu-deps in the GPU call)"
    exit 0
fi

OUT="${OUT:-$ROOT/gpu-out}"
mkdir -p "$OUT"
B="${BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-16}"
STEPS="${GPU_STEPS:-build ctest sanitize sass pytest bench}"
DEADLINE_S="${DEADLINE_S:-560}"
START=$(date +%s)
SCRATCH="$(mktemp -d)"
export PYTHONUNBUFFERED=1

CMAKE_EXTRA=()
if [ -d "$DEPS/cmocka" ]; then
    CMAKE_EXTRA+=("-DCMAKE_PREFIX_PATH=$DEPS/cmocka")
    export LD_LIBRARY_PATH="$DEPS/cmocka/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -n "${CUDA_ARCHS:-}" ]; then CMAKE_EXTRA+=("-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS"); fi
NVCC_FLAGS="-Xptxas=-v${CUDA_FLAGS:+ $CUDA_FLAGS}"
GENERATOR=()
if command -v ninja >/dev/null 2>&1; then GENERATOR=(-G Ninja); fi
LIB="$B/src/libflashc.so"
SANITIZER="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
CUOBJDUMP="$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)"

# Seconds a step may still take: its own cap, or what the deadline leaves.
budget() {
    local cap=$1 left=$(( DEADLINE_S - ($(date +%s) - START) - 10 ))
    [ "$left" -lt "$cap" ] && cap=$left
    [ "$cap" -lt 1 ] && cap=1
    echo "$cap"
}

declare -A RESULT SECS NOTE

step_build() {
    {
        echo "# $(date -u '+%F %T UTC')  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
        echo "# $(nvcc --version | tail -1); $(cmake --version | head -1)"
        cmake -S . -B "$B" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DFLASHC_CUDA=ON \
            -DCMAKE_CUDA_FLAGS="$NVCC_FLAGS" "${CMAKE_EXTRA[@]}"
    } > "$OUT/build.log" 2>&1 || return 1
    timeout "$(budget 330)" cmake --build "$B" -j "$JOBS" >> "$OUT/build.log" 2>&1 || return 1
    # ptxas -v, per kernel: the lines that matter for speed
    local spills stack
    spills=$(grep -c 'bytes spill stores' "$OUT/build.log")
    stack=$(grep -Eo '[0-9]+ bytes stack frame' "$OUT/build.log" | awk '$1 > 0' | wc -l)
    local nonzero_spills
    nonzero_spills=$(grep -cE '[1-9][0-9]* bytes spill (stores|loads)' "$OUT/build.log")
    # wgmma serialized by ptxas (an accumulator read in flight, too few
    # registers, a divergent path, ...) costs a Hopper kernel 10 % or more;
    # C7517 (a wait it added where a path had waited already) does not
    local serialized
    serialized=$(grep -c 'wgmma.mma_async instructions are serialized' "$OUT/build.log")
    NOTE[build]="ptxas: $spills kernel reports, $nonzero_spills with spills, $stack with a stack frame, $serialized with wgmma serialized"
}

step_ctest() {
    local log="$OUT/ctest.log" fwd_log="$SCRATCH/cuda_fwd.log" bwd_log="$SCRATCH/cuda_bwd.log"
    # the two CUDA test programs (the long ones) beside the CPU tests; the
    # backward's in quick mode (one reproducibility case of each kind), one
    # process per test (their CPU-side references run side by side)
    ( cd "$B" && timeout "$(budget 300)" ctest -R '^test_cuda_forward$' -V > "$fwd_log" 2>&1 ) &
    local fwd_pid=$!
    local bwd_tests bwd_pids=() name
    bwd_tests=$(grep -oE 'cmocka_unit_test\([a-z_0-9]+\)' tests/test_cuda_backward.c | sed 's/.*(\(.*\))/\1/')
    : > "$bwd_log"
    for name in $bwd_tests; do
        ( cd "$B/tests" && FLASHC_TEST_FILTER="$name" FLASHC_TEST_QUICK=1 OMP_NUM_THREADS=2 \
              timeout "$(budget 300)" ./test_cuda_backward > "$SCRATCH/cuda_bwd_$name.log" 2>&1 ) &
        bwd_pids+=($!)
    done
    # the KV-cache tests once more on the portable kernel (on a Hopper GPU
    # ctest's run takes the TMA kernel wherever it applies)
    ( cd "$B/tests" && FLASHC_CUDA_KVCACHE=portable FLASHC_TEST_QUICK=1 timeout "$(budget 300)" \
          ./test_cuda_kvcache > "$SCRATCH/cuda_kvc_portable.log" 2>&1 ) &
    local kvp_pid=$!
    # and on the Hopper wide kernel (8 warps, 128-key steps), which by itself
    # takes only long caches (hopper_kvcache.h)
    ( cd "$B/tests" && FLASHC_CUDA_KVCACHE=wide FLASHC_TEST_QUICK=1 timeout "$(budget 300)" \
          ./test_cuda_kvcache > "$SCRATCH/cuda_kvc_wide.log" 2>&1 ) &
    local kvw_pid=$!
    # the portable kernels with the shared memory of an sm_86 / sm_89 part
    # (99 KiB per CTA): the configurations chosen for it, every head dim, and
    # their shared last waves (the SMALL tiles: every case takes one there too)
    ( cd "$B/tests" && export FLASHC_CUDA_SMEM_LIMIT=101376 FLASHC_CUDA_FORWARD=portable \
          FLASHC_CUDA_BACKWARD=portable FLASHC_CUDA_KVCACHE=portable FLASHC_TEST_QUICK=1 &&
      FLASHC_TEST_QUICK=0 FLASHC_TEST_FILTER=every_configuration timeout "$(budget 300)" ./test_cuda_backward &&
      FLASHC_TEST_FILTER=shared_last_wave timeout "$(budget 300)" ./test_cuda_backward &&
      timeout "$(budget 300)" ./test_cuda_kvcache && FLASHC_TEST_FILTER=features_alone timeout "$(budget 300)" \
          ./test_cuda_forward ) > "$SCRATCH/cuda_99k.log" 2>&1 &
    local small_pid=$!
    # and with A100's 163 KiB per CTA: two Q / dO stages at head dims 64 -
    # 128 (unpadded tiles), one at 192 / 256 (the one-stage path, which the
    # H200 does not take by itself); then the portable backward's GQA head
    # splits (quick), on the H200's own limit
    ( cd "$B/tests" && export FLASHC_CUDA_BACKWARD=portable &&
      FLASHC_CUDA_SMEM_LIMIT=166912 FLASHC_TEST_FILTER=every_configuration timeout "$(budget 300)" \
          ./test_cuda_backward &&
      FLASHC_TEST_QUICK=1 FLASHC_TEST_FILTER=gqa_head_splits timeout "$(budget 300)" ./test_cuda_backward ) \
        > "$SCRATCH/cuda_163k.log" 2>&1 &
    local a100_pid=$!
    timeout "$(budget 300)" ctest --test-dir "$B" -E '^test_cuda_(forward|backward)$' -j 8 --output-on-failure \
        > "$log" 2>&1
    local rc_cpu=$?
    wait "$kvp_pid"
    local rc_kvp=$?
    wait "$kvw_pid"
    local rc_kvw=$?
    wait "$small_pid"
    local rc_small=$?
    wait "$a100_pid"
    local rc_a100=$?
    wait "$fwd_pid"
    local rc_fwd=$? rc_bwd=0 pid bwd_passed=0 bwd_count=0
    for pid in "${bwd_pids[@]}"; do wait "$pid" || rc_bwd=1; done
    for name in $bwd_tests; do
        bwd_count=$((bwd_count + 1))
        grep -q '^\[  PASSED  \] 1 test' "$SCRATCH/cuda_bwd_$name.log" && bwd_passed=$((bwd_passed + 1))
        { echo "--- $name"; cat "$SCRATCH/cuda_bwd_$name.log"; } >> "$bwd_log"
    done
    {
        echo
        echo "=== test_cuda_forward (ctest -V) ==="
        grep -vE '^[0-9]+: \[ (RUN|      OK) ' "$fwd_log"
        echo
        echo "=== test_cuda_backward (FLASHC_TEST_QUICK=1, one process per test) ==="
        grep -vE '^[0-9]+: \[ (RUN|      OK) ' "$bwd_log"
        echo
        echo "=== test_cuda_kvcache, portable kernel (FLASHC_CUDA_KVCACHE=portable, quick) ==="
        grep -vE '^\[ (RUN|      OK) ' "$SCRATCH/cuda_kvc_portable.log"
        echo
        echo "=== test_cuda_kvcache, Hopper wide kernel (FLASHC_CUDA_KVCACHE=wide, quick) ==="
        grep -vE '^\[ (RUN|      OK) ' "$SCRATCH/cuda_kvc_wide.log"
        echo
        echo "=== portable kernels at 99 KiB of shared memory per CTA (FLASHC_CUDA_SMEM_LIMIT=101376):"
        echo "    test_cuda_backward every_configuration (all 27), test_cuda_kvcache and test_cuda_forward"
        echo "    features_alone (quick) ==="
        grep -vE '^\[ (RUN|      OK) ' "$SCRATCH/cuda_99k.log"
        echo
        echo "=== the portable backward at A100's 163 KiB per CTA (FLASHC_CUDA_SMEM_LIMIT=166912):"
        echo "    test_cuda_backward every_configuration; then its gqa_head_splits (quick) ==="
        grep -vE '^\[ (RUN|      OK) ' "$SCRATCH/cuda_163k.log"
        echo
        echo "=== flashc run (default problem on the GPU, checked against the reference) ==="
        timeout "$(budget 120)" "$B/flashc" run --repeat 5 --warmup 2 --quiet
        echo "flashc run exit status: $?"
    } >> "$log" 2>&1
    local cpu_line fwd_line bwd_line
    cpu_line=$(grep -E 'tests passed|tests failed' "$log" | head -1)
    fwd_line=$(grep -E 'Test +#[0-9]+: test_cuda_forward' "$fwd_log" | sed 's/.*test_cuda_forward *\.*//')
    bwd_line="$bwd_passed/$bwd_count tests passed"
    NOTE[ctest]="CPU tests: ${cpu_line:-?}; test_cuda_forward: ${fwd_line:-?}; test_cuda_backward: ${bwd_line:-?}"
    NOTE[ctest]+="; test_cuda_kvcache portable: $( [ "$rc_kvp" -eq 0 ] && echo passed || echo "status $rc_kvp")"
    NOTE[ctest]+="; wide: $( [ "$rc_kvw" -eq 0 ] && echo passed || echo "status $rc_kvw")"
    NOTE[ctest]+="; 99 KiB portable: $( [ "$rc_small" -eq 0 ] && echo passed || echo "status $rc_small")"
    NOTE[ctest]+="; 163 KiB portable backward: $( [ "$rc_a100" -eq 0 ] && echo passed || echo "status $rc_a100")"
    grep -q '^result    PASS' "$log" || NOTE[ctest]+="; flashc run check did not PASS"
    [ "$rc_cpu" -eq 0 ] && [ "$rc_fwd" -eq 0 ] && [ "$rc_bwd" -eq 0 ] && [ "$rc_kvp" -eq 0 ] && [ "$rc_kvw" -eq 0 ] &&
        [ "$rc_small" -eq 0 ] && [ "$rc_a100" -eq 0 ] &&
        grep -q '^result    PASS' "$log"
}

step_sanitize() {
    local log="$OUT/sanitize.log" rc=0 t
    : > "$log"
    if [ ! -x "$SANITIZER" ]; then echo "compute-sanitizer not found" >> "$log"; return 1; fi
    run_sanitizer() { # name, seconds, command...
        local name=$1 secs=$2
        shift 2
        echo "=== $name ===" >> "$log"
        t=$(date +%s)
        timeout "$(budget "$secs")" "$SANITIZER" --error-exitcode 99 --print-limit 20 "$@" > "$SCRATCH/san.log" 2>&1
        local status=$?
        # the sanitizer's own lines and the test summary, not every case
        grep -E '^(=========|\[  (PASSED|FAILED|SKIPPED|  ERROR)|cuda .*cases passed|result |FAIL)' "$SCRATCH/san.log" | head -80 >> "$log"
        echo "exit status $status ($(( $(date +%s) - t )) s)" >> "$log"
        [ "$status" -ne 0 ] && rc=1
        NOTE[sanitize]+="$name: $( [ "$status" -eq 0 ] && echo clean || echo "status $status"); "
    }
    # On a Hopper GPU the plain problems take the Hopper kernels and the
    # rest the portable ones; FLASHC_CUDA_FORWARD=portable sends all there.
    FLASHC_TEST_QUICK=1 run_sanitizer "memcheck test_cuda_forward (quick)" 150 \
        --tool memcheck --leak-check no "$B/tests/test_cuda_forward"
    FLASHC_TEST_QUICK=1 FLASHC_CUDA_FORWARD=portable FLASHC_TEST_FILTER='features_alone' run_sanitizer \
        "memcheck test_cuda_forward features_alone (quick, portable kernels)" 100 \
        --tool memcheck --leak-check no "$B/tests/test_cuda_forward"
    # the KV-cache kernels (append with rotary, split attention, combine),
    # out-of-range index tensors among them, and the paged varlen forward
    FLASHC_TEST_QUICK=1 run_sanitizer "memcheck test_cuda_kvcache (quick)" 150 \
        --tool memcheck --leak-check no "$B/tests/test_cuda_kvcache"
    local filter
    for filter in paged masks bad_indices; do
        FLASHC_TEST_QUICK=1 FLASHC_TEST_FILTER="$filter" run_sanitizer "racecheck test_cuda_kvcache $filter (quick)" \
            90 --tool racecheck --racecheck-report analysis "$B/tests/test_cuda_kvcache"
    done
    FLASHC_TEST_QUICK=1 FLASHC_TEST_FILTER=paged FLASHC_CUDA_KVCACHE=wide run_sanitizer \
        "racecheck test_cuda_kvcache paged (quick, Hopper wide kernel)" 90 --tool racecheck --racecheck-report analysis \
        "$B/tests/test_cuda_kvcache"
    run_sanitizer "memcheck flashc run (small, varlen, dropout)" 60 --tool memcheck \
        "$B/flashc" run --batch 3 --heads 4 --kv-heads 2 --seqlen 300 --hdim 128 --varlen \
        --dropout 0.1 --forward-only --quiet
    run_sanitizer "memcheck flashc run with backward (small, varlen, GQA, dropout, softcap)" 60 --tool memcheck \
        "$B/flashc" run --batch 3 --heads 4 --kv-heads 2 --seqlen 300 --hdim 96 --varlen \
        --dropout 0.1 --softcap 5 --quiet
    # the backward: on a Hopper GPU every head dim takes the Hopper kernel
    # (TMA producer, bulk copies of the LSE / D rows, wgmma consumers)
    local problem
    for problem in "--hdim 128 --seqlen 200 --causal" "--hdim 128 --seqlen 300 --kv-heads 2 --no-causal" \
                   "--hdim 64 --seqlen 200 --varlen --dropout 0.1 --softcap 5 --causal" \
                   "--hdim 128 --seqlen 260 --deterministic --window 50,20 --no-causal" \
                   "--hdim 128 --seqlen 300 --kv-heads 1 --causal" \
                   "--hdim 64 --seqlen 200 --kv-heads 1 --varlen --deterministic --no-causal" \
                   "--hdim 256 --seqlen 200 --kv-heads 2 --causal" \
                   "--hdim 192 --hdim-v 128 --seqlen 150 --deterministic --no-causal"; do
        # shellcheck disable=SC2086
        run_sanitizer "racecheck flashc run with backward $problem" 90 --tool racecheck --racecheck-report analysis \
            "$B/flashc" run --batch 2 --heads 4 $problem --quiet
    done
    # the portable backward (sm_80 - sm_89; forced here): each head dim's
    # configuration, plain and general variants, a shared last wave (d128
    # at 700: 48 tiles over 132 tail CTAs on an H100 / H200), and a SMALL
    # one (99 KiB)
    for problem in "--hdim 64 --seqlen 200 --causal" "--hdim 128 --seqlen 300 --kv-heads 2 --no-causal" \
                   "--hdim 128 --seqlen 700 --no-causal" \
                   "--hdim 256 --seqlen 130 --causal" "--hdim 64 --seqlen 150 --softcap 5 --no-causal" \
                   "--hdim 96 --seqlen 100 --dropout 0.1 --alibi h --causal" \
                   "--hdim 192 --hdim-v 128 --seqlen 150 --deterministic --no-causal"; do
        # shellcheck disable=SC2086
        FLASHC_CUDA_BACKWARD=portable run_sanitizer "racecheck flashc run with portable backward $problem" 90 \
            --tool racecheck --racecheck-report analysis "$B/flashc" run --batch 2 --heads 4 $problem --quiet
    done
    FLASHC_CUDA_BACKWARD=portable FLASHC_CUDA_SMEM_LIMIT=101376 run_sanitizer \
        "racecheck flashc run with portable backward, 99 KiB (--hdim 64 --seqlen 200 --causal)" 90 \
        --tool racecheck --racecheck-report analysis "$B/flashc" run --batch 2 --heads 4 --hdim 64 --seqlen 200 \
        --causal --quiet
    FLASHC_CUDA_BACKWARD=portable run_sanitizer "memcheck flashc run with portable backward (shared last wave)" 60 \
        --tool memcheck "$B/flashc" run --batch 2 --heads 4 --seqlen 700 --hdim 128 --no-causal --quiet
    FLASHC_CUDA_BACKWARD=portable run_sanitizer "memcheck flashc run with portable backward (varlen, GQA, window)" 60 \
        --tool memcheck "$B/flashc" run --batch 3 --heads 4 --kv-heads 2 --seqlen 300 --hdim 128 --varlen --no-causal \
        --window 60,10 --quiet
    # the portable forward's shared last wave (on an H100 / H200: 24 row
    # blocks over 96 tail CTAs, no main grid; 288 row blocks, 264 in the
    # main grid and 24 over 54 tail CTAs)
    for problem in "--batch 1 --heads 3 --seqlen 1000 --hdim 128" "--batch 2 --heads 16 --seqlen 1100 --hdim 64"; do
        # shellcheck disable=SC2086
        FLASHC_CUDA_FORWARD=portable run_sanitizer "memcheck flashc run, portable forward's shared last wave $problem" \
            60 --tool memcheck "$B/flashc" run $problem --no-causal --forward-only --quiet
        # shellcheck disable=SC2086
        FLASHC_CUDA_FORWARD=portable run_sanitizer "racecheck flashc run, portable forward's shared last wave $problem" \
            90 --tool racecheck --racecheck-report analysis "$B/flashc" run $problem --no-causal --forward-only --quiet
    done
    for problem in "--hdim 128 --seqlen 300 --no-causal" "--hdim 64 --seqlen 200 --causal --varlen" \
                   "--hdim 256 --seqlen 130 --kv-heads 2 --window 40,8 --no-causal" \
                   "--hdim 64 --seqlen 150 --dropout 0.2 --alibi h" "--hdim 96 --seqlen 100 --softcap 20" \
                   "--hdim 192 --hdim-v 128 --seqlen 270 --causal" "--hdim 192 --seqlen 130 --no-causal --softcap 10"; do
        # shellcheck disable=SC2086
        run_sanitizer "racecheck flashc run $problem" 60 --tool racecheck --racecheck-report analysis \
            "$B/flashc" run --batch 2 --heads 4 $problem --forward-only --quiet
    done
    return "$rc"
}

step_sass() {
    [ -f "$LIB" ] || { echo "no $LIB" > "$OUT/sass.txt"; return 1; }
    timeout "$(budget 60)" "$CUOBJDUMP" --dump-sass "$LIB" > "$SCRATCH/sass.raw" 2>&1 || return 1
    python3 - "$SCRATCH/sass.raw" > "$OUT/sass.txt" <<'EOF'
import re, shutil, subprocess, sys
kernels, order, cur, arch = {}, [], None, "?"
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s*arch = (sm_\w+)", line)
    if m:
        arch = m.group(1)
        continue
    m = re.search(r"Function : (\S+)", line)
    if m:
        cur = (arch, m.group(1))
        if cur not in kernels:
            kernels[cur] = dict(HMMA=0, HGMMA=0, LDL=0, STL=0, insts=0)
            order.append(cur)
        continue
    if cur is None or not re.match(r"\s+/\*[0-9a-f]{4,}\*/", line):
        continue
    k = kernels[cur]
    k["insts"] += 1
    for op in ("HGMMA", "HMMA", "LDL", "STL"):
        if re.search(r"\b%s\b" % op, line) or re.search(r"\b%s\." % op, line):
            k[op] += 1
names = {}
mangled = sorted({n for _, n in order})
if shutil.which("c++filt"):
    out = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True).stdout
    names = dict(zip(mangled, out.splitlines()))
fwd = lambda key: re.search(r"fwd|forward", key[1], re.I) is not None
print(f"{'arch':>6} {'HMMA':>6} {'HGMMA':>6} {'LDL':>5} {'STL':>5} {'insts':>7}  kernel")
for key in order:
    k = kernels[key]
    flag = "  <-- local memory in a forward kernel" if fwd(key) and (k["LDL"] or k["STL"]) else ""
    print(f"{key[0]:>6} {k['HMMA']:6d} {k['HGMMA']:6d} {k['LDL']:5d} {k['STL']:5d} {k['insts']:7d}  "
          f"{names.get(key[1], key[1])[:160]}{flag}")
f = [n for n in order if fwd(n)]
local = [n for n in f if kernels[n]["LDL"] or kernels[n]["STL"]]
print(f"# {len(order)} kernels (one per SASS architecture), {len(f)} forward; forward kernels with LDL/STL: {len(local)}; "
      f"HMMA total {sum(k['HMMA'] for k in kernels.values())}, HGMMA total {sum(k['HGMMA'] for k in kernels.values())}")
EOF
    NOTE[sass]="$(tail -1 "$OUT/sass.txt" | sed 's/^# //')"
    # local memory in a forward kernel is a finding, not a failed step
    return 0
}

step_pytest() {
    local log="$OUT/pytest.log"
    : > "$log"
    if [ ! -d python ] || [ ! -f pyproject.toml ]; then
        echo "no python/ or pyproject.toml: nothing to test" > "$log"
        NOTE[pytest]="skipped (no package)"
        return 0
    fi
    local via="pip install"
    # Reuse the CMake build of the build step (same directory, generator
    # and options): nothing is compiled again.
    local settings=(-C "build-dir=$B" -C cmake.build-type=Release -C cmake.define.FLASHC_CUDA=ON
                    -C cmake.define.FLASHC_BUILD_TESTS=ON -C cmake.define.FLASHC_BUILD_TOOLS=ON
                    -C "cmake.define.CMAKE_CUDA_FLAGS=$NVCC_FLAGS")
    [ -n "${CUDA_ARCHS:-}" ] && settings+=(-C "cmake.define.CMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS")
    [ -d "$DEPS/cmocka" ] && settings+=(-C "cmake.define.CMAKE_PREFIX_PATH=$DEPS/cmocka")
    if ! timeout "$(budget 150)" python3 -m pip install --no-build-isolation --no-deps --no-cache-dir \
            "${settings[@]}" . > "$SCRATCH/pip.log" 2>&1; then
        tail -30 "$SCRATCH/pip.log" >> "$log"
        echo "=== pip install failed: testing python/ with FLASHC_LIBRARY=$LIB instead ===" >> "$log"
        export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
        via="PYTHONPATH"
    else
        tail -3 "$SCRATCH/pip.log" >> "$log"
    fi
    # the library the other steps tested, whichever way the package came
    export FLASHC_LIBRARY="$LIB"
    # shellcheck disable=SC2086
    timeout "$(budget 240)" python3 -m pytest tests/python -q -p no:cacheprovider --maxfail=30 \
        ${PYTEST_ARGS--k cuda} > "$SCRATCH/pytest.log" 2>&1
    tail -80 "$SCRATCH/pytest.log" >> "$log"
    NOTE[pytest]="via $via: $(grep -E ' in [0-9.]+s' "$log" | tail -1 | tr -d '=')"
    grep -qE '[0-9]+ passed' "$log" && ! grep -qE '[0-9]+ (failed|error)' "$log"
}

step_kvcache() {
    local log="$OUT/kvcache.log" name status=0
    local -A mode_env=([default]="" [wide]="FLASHC_CUDA_KVCACHE=wide FLASHC_TEST_QUICK=1"
                       [tall]="FLASHC_CUDA_KVCACHE=tall FLASHC_TEST_QUICK=1"
                       [tall128]="FLASHC_CUDA_KVCACHE=tall128 FLASHC_TEST_QUICK=1"
                       [portable]="FLASHC_CUDA_KVCACHE=portable FLASHC_TEST_QUICK=1"
                       [tma]="FLASHC_CUDA_KVCACHE=tma FLASHC_TEST_QUICK=1"
                       [pairs]="FLASHC_CUDA_KVCACHE=pairs FLASHC_TEST_QUICK=1"
                       [kernel_append]="FLASHC_CUDA_KVCACHE_APPEND=kernel FLASHC_TEST_QUICK=1"
                       [serial_append]="FLASHC_CUDA_KVCACHE_APPEND=serial FLASHC_TEST_QUICK=1")
    for name in default wide tall tall128 portable tma pairs kernel_append serial_append; do
        # shellcheck disable=SC2086
        ( cd "$B/tests" && env ${mode_env[$name]} timeout "$(budget 240)" ./test_cuda_kvcache \
              > "$SCRATCH/kvc_$name.log" 2>&1; echo $? > "$SCRATCH/kvc_$name.rc" ) &
    done
    ( cd "$B/tests" && FLASHC_TEST_QUICK=1 timeout "$(budget 240)" "$SANITIZER" --tool memcheck --leak-check no \
          --error-exitcode 99 --print-limit 20 ./test_cuda_kvcache > "$SCRATCH/kvc_memcheck.log" 2>&1
      echo $? > "$SCRATCH/kvc_memcheck.rc" ) &
    FLASHC_LIBRARY="$LIB" PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" timeout "$(budget 240)" \
        python3 -m pytest tests/python -q -p no:cacheprovider -k "cuda and (kvcache or paged)" \
        > "$SCRATCH/kvc_pytest.log" 2>&1 || status=1
    wait
    : > "$log"
    NOTE[kvcache]=""
    local rc
    for name in default wide tall tall128 portable tma pairs kernel_append serial_append memcheck; do
        rc=$(cat "$SCRATCH/kvc_$name.rc" 2>/dev/null || echo "?")
        [ "$rc" = 0 ] || status=1
        { echo "=== test_cuda_kvcache, $name: exit status $rc"
          grep -vE '^\[ (RUN|      OK) ' "$SCRATCH/kvc_$name.log"; } >> "$log"
        NOTE[kvcache]+="$name: $( [ "$rc" = 0 ] && echo passed || echo "status $rc"); "
    done
    { echo "=== pytest -k \"cuda and (kvcache or paged)\""; tail -30 "$SCRATCH/kvc_pytest.log"; } >> "$log"
    NOTE[kvcache]+="pytest: $(grep -E ' in [0-9.]+s' "$SCRATCH/kvc_pytest.log" | tail -1 | tr -d '=')"
    return "$status"
}

step_decode() {
    local log="$OUT/decode_rows.md" row status=0
    FLASHC_LIBRARY="$LIB" PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" timeout "$(budget 240)" \
        python3 bench/kvcache_peers.py --out "$OUT/decode_peers.tsv" > "$SCRATCH/peers.log" 2>&1 || status=1
    FLASHC_LIBRARY="$LIB" PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" timeout "$(budget 240)" \
        python3 bench/kvcache_models_peers.py --out "$OUT/decode_models.tsv" > "$SCRATCH/models.log" 2>&1 || status=1
    : > "$log"
    for row in ${DECODE_ROWS:-8,1,131072 8,4,32768 8,16,16384 8,64,4096 8,256,1024 32,1,131072 32,64,4096}; do
        timeout "$(budget 60)" "$B/kvcache_bench" --shape "$row" >> "$log" 2>&1 || status=1
    done
    for row in ${DECODE_APPEND_ROWS:-8,1,16384 8,32,8192 8,1,131072}; do
        timeout "$(budget 60)" "$B/kvcache_bench" --shape "$row" --layouts 0,16 --append >> "$log" 2>&1 || status=1
    done
    { echo; echo "kvcache_models_peers.py's notes and errors:"; grep -v $'\t' "$SCRATCH/models.log"; } >> "$log"
    NOTE[decode]="$(grep -m1 '^# copy' "$SCRATCH/peers.log"); flashc / best $(awk -F'\t' 'NR > 1 {
        if (min == "" || $NF < min) min = $NF; if ($NF > max) max = $NF } END { print min "-" max }' \
        "$OUT/decode_peers.tsv" 2>/dev/null)"
    return "$status"
}

step_bench() {
    local log="$OUT/bench.log"
    {
        echo "=== flashc bench --quick (C benchmark, GPU grid) ==="
        timeout "$(budget 90)" "$B/flashc" bench --quick --repeat 10 --warmup 3
        echo "exit status $?"
        echo
        # the deterministic backward's cost: the same problems both ways
        echo "=== flashc bench, backward default and deterministic (seqlen 2048, 16384) ==="
        timeout "$(budget 60)" "$B/flashc" bench --seqlen 2048,16384 --repeat 10 --warmup 3
        timeout "$(budget 60)" "$B/flashc" bench --seqlen 2048,16384 --repeat 10 --warmup 3 --deterministic
        echo
        echo "=== bench/gpu_sdpa_bench.py ${BENCH_ARGS:-} ==="
    } > "$log" 2>&1
    # shellcheck disable=SC2086
    FLASHC_LIBRARY="$LIB" timeout "$(budget 330)" python3 bench/gpu_sdpa_bench.py --lib "$LIB" \
        --out "$OUT/bench.tsv" ${BENCH_ARGS:-} >> "$log" 2>&1
    local status=$?
    {
        echo
        echo "=== bench/percall_bench.py (per-call cost of a small problem beside SDPA flash) ==="
        FLASHC_LIBRARY="$LIB" PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" \
            timeout "$(budget 120)" python3 bench/percall_bench.py
    } >> "$log" 2>&1 || status=1
    NOTE[bench]="$(grep -E '^geometric mean' "$log" | tr '\n' ' ')"
    return "$status"
}

for step in $STEPS; do
    if ! declare -F "step_$step" >/dev/null; then
        echo "gpu_check: unknown step '$step' (steps: build ctest sanitize sass pytest bench kvcache decode)"
        RESULT[$step]=unknown
        SECS[$step]=0
        continue
    fi
    echo "=== gpu_check: $step ($(( $(date +%s) - START )) s elapsed) ==="
    t=$(date +%s)
    if "step_$step"; then RESULT[$step]=pass; else RESULT[$step]=FAIL; fi
    SECS[$step]=$(( $(date +%s) - t ))
    echo "=== gpu_check: $step: ${RESULT[$step]} (${SECS[$step]} s) ${NOTE[$step]:-} ==="
done

{
    # the tree checked: HEAD, and whether its tracked files differ from it
    # (a copy of a working tree may carry an older .git than its files)
    tree="$(git rev-parse --short HEAD 2>/dev/null || echo ?)"
    git diff --quiet HEAD -- 2>/dev/null || tree="$tree + uncommitted changes to tracked files"
    echo "gpu_check $(date -u '+%F %T UTC'), commit $tree," \
         "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), total $(( $(date +%s) - START )) s"
    printf '%-9s %-6s %5s  %s\n' step result secs notes
    for step in $STEPS; do
        printf '%-9s %-6s %5s  %s\n' "$step" "${RESULT[$step]:-?}" "${SECS[$step]:-?}" "${NOTE[$step]:-}"
    done
} | tee "$OUT/summary.txt"
rm -rf "$SCRATCH"
for step in $STEPS; do [ "${RESULT[$step]:-}" = pass ] || exit 1; done
exit 0
