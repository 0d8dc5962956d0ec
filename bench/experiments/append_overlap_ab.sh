#!/usr/bin/env bash
# One device call (about 150 s after the start): does the append's overlap with the attention's pipeline fill
# (branch exp/append-overlap) pass the KV-cache tests, and what does it save per call?
#   carry build-gpu-deps (cmocka); run from the repository root.
# 1. build with tests; gpu_check's kvcache step: test_cuda_kvcache in full on the default kernels (now with the
#    early reads wherever an append runs on Hopper), quick under each forced kernel and with
#    FLASHC_CUDA_KVCACHE_APPEND=serial (the old order), under memcheck, and pytest kvcache / paged;
# 2. kvcache_bench --append (plain, +append, +append+rotary) with the early reads and serial, two rounds of each in
#    turned order, on a short call (1 x 16384), a full wave (32 x 8192) and MQA 128 x 8192.
set -uo pipefail
ROOT=$PWD; R=$OUT/append_overlap_ab.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; git log --oneline -1; } > $R 2>&1
t0=$(date +%s)
export LD_LIBRARY_PATH=$ROOT/build-gpu-deps/cmocka/lib
GPU_STEPS="build kvcache" CUDA_ARCHS=90-real DEADLINE_S=150 bash scripts/gpu_check.sh > $OUT/gpu_check.out 2>&1
echo "gpu_check rc $? $(( $(date +%s)-t0 )) s" >> $R
tail -4 $OUT/gpu_check.out >> $R
grep -E "exit status|FAIL|failed|ERROR SUMMARY" $OUT/kvcache.log | head -30 >> $R
timeout 40 cmake --build build-gpu -j 16 --target kvcache_bench > /dev/null 2>&1
A() { echo "== $1" >> $R; shift
  for s in 8,1,16384 8,32,8192 1,128,8192; do
    env "$@" timeout 20 build-gpu/kvcache_bench --shape $s --layouts 0 --append 2>&1 |
      grep -E '^\| [0-9]|^# append' >> $R
  done; }
A "early 1" X=1; A "serial 1" FLASHC_CUDA_KVCACHE_APPEND=serial
A "serial 2" FLASHC_CUDA_KVCACHE_APPEND=serial; A "early 2" X=1
echo "done $(( $(date +%s)-t0 )) s" >> $R
cat $R
