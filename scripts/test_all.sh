#!/usr/bin/env bash
# Every test of flashc in one command:
#   0. the system packages the tests need, installed where missing
#      (scripts/install_deps.sh: apt-get as root or through sudo; without
#      either it prints the command and nothing runs);
#   1. Release build (gcc or $CC) + the whole ctest suite;
#   2. ASan + UBSan build with clang + the suite in quick mode;
#   3. the libFuzzer target (clang) for a bounded time;
#   4. the Python package: its virtual environment (scripts/python_env.sh,
#      torch and the test tools from PyPI), `pip install .` into it, pytest.
# Each step is one block below: add a step by adding a block and its name
# to STEPS. Exit status is non-zero when any step failed; the last line is
# a summary.
#
# Environment: JOBS (parallel build jobs, default 2), FUZZ_SECONDS (default
# 60), FLASHC_CUDA (AUTO/ON/OFF, default AUTO), BUILD_PREFIX (directory for
# the build trees, default the repository root), FLASHC_VENV (the Python
# environment, default .venv), FLASHC_SKIP_INSTALL_DEPS=1 (do not check or
# install system packages).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${JOBS:-2}"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
CUDA_MODE="${FLASHC_CUDA:-AUTO}"
PREFIX="${BUILD_PREFIX:-$ROOT}"

step_release() {
    local dir="$PREFIX/build-ci"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DFLASHC_CUDA="$CUDA_MODE" &&
    cmake --build "$dir" -j "$JOBS" &&
    ctest --test-dir "$dir" --output-on-failure
}

step_sanitize() {
    local dir="$PREFIX/build-ci-asan"
    CC=clang cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHC_SANITIZE=ON \
        -DFLASHC_CUDA=OFF &&
    cmake --build "$dir" -j "$JOBS" &&
    # intercept_tls_get_addr=0: the __tls_get_addr interceptor of LLVM <= 16
    # (Debian's clang 14) takes a dynamic TLS block that happens to start 16
    # bytes into a page for a glibc-2.19 header and reads garbage bounds from
    # it, so the leak checker's tracer crashes at exit now and then ("Tracer
    # caught signal 11") after every test passed. The library keeps no heap
    # pointer in thread-local storage (only a fixed message buffer).
    FLASHC_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir "$dir" --output-on-failure
}

step_fuzz() {
    local dir="$PREFIX/build-ci-fuzz"
    CC=clang cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHC_SANITIZE=ON \
        -DFLASHC_FUZZ=ON -DFLASHC_BUILD_TESTS=OFF -DFLASHC_BUILD_TOOLS=OFF -DFLASHC_CUDA=OFF &&
    cmake --build "$dir" -j "$JOBS" --target flashc_fuzz_api || return 1
    mkdir -p "$dir/corpus" "$dir/artifacts"
    # Seed inputs checked in with the target, then a bounded run; any crash
    # or sanitizer report stops it with a non-zero status and leaves the
    # reproducer in $dir/artifacts.
    "$dir/flashc_fuzz_api" -max_total_time="$FUZZ_SECONDS" -timeout=30 -max_len=256 -len_control=0 \
        -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
        "$dir/corpus" "$ROOT/tests/fuzz/seeds"
}

step_python() {
    local python
    python="$(bash scripts/python_env.sh | tail -n 1)" || return 1
    # The wheel's CMake build (scikit-build-core) keeps its tree between runs.
    CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" "$python" -m pip install -q --disable-pip-version-check \
        --no-build-isolation --config-settings=cmake.define.FLASHC_CUDA="$CUDA_MODE" \
        --config-settings=build-dir="$PREFIX/build-py/{wheel_tag}" . || return 1
    # The installed package is tested (FLASHC_LIBRARY would point elsewhere).
    env -u FLASHC_LIBRARY "$python" -m pytest tests/python -q -rfE -p no:cacheprovider
}

STEPS=(release sanitize fuzz python)

if [ "${FLASHC_SKIP_INSTALL_DEPS:-0}" != 1 ]; then
    bash scripts/install_deps.sh || {
        echo "test_all: FAIL: the system packages above are missing (FLASHC_SKIP_INSTALL_DEPS=1 skips this step)"
        exit 1
    }
fi

declare -A RESULT
declare -A SECONDS_TAKEN
failed=0
for step in "${STEPS[@]}"; do
    echo "=== test_all: step '$step' ==="
    start=$(date +%s)
    if "step_$step"; then RESULT[$step]=pass; else RESULT[$step]=FAIL; failed=1; fi
    SECONDS_TAKEN[$step]=$(( $(date +%s) - start ))
    echo "=== test_all: step '$step': ${RESULT[$step]} (${SECONDS_TAKEN[$step]} s) ==="
done

summary=""
for step in "${STEPS[@]}"; do summary+=" $step=${RESULT[$step]}(${SECONDS_TAKEN[$step]}s)"; done
if [ "$failed" -eq 0 ]; then
    echo "test_all: PASS:$summary"
else
    echo "test_all: FAIL:$summary"
fi
exit "$failed"
