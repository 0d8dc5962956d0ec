#!/usr/bin/env bash
# One device call (about 150 s after the start): the three ways a KV-cache call with an append runs on Hopper
# (FLASHC_CUDA_KVCACHE_APPEND, kvcache_backend.cu): fused (the attention's CTAs write the new rows and rotate Q
# themselves), kernel (the append kernel, the attention reading the older rows before it ends) and serial.
#   carry build-gpu-deps (cmocka); run from the repository root.
# 1. build with tests; gpu_check's kvcache step: test_cuda_kvcache in full on the default kernels (fused), quick
#    under each forced kernel, with kernel_append and serial_append, under memcheck, and pytest kvcache / paged;
# 2. kvcache_bench --append (plain, +append, +append+rotary) in each mode, two rounds in turned order, on a short
#    call (1 x 16384), a full wave (32 x 8192), 1 x 131072, MQA 128 x 8192, contiguous and paged 16.
set -uo pipefail
ROOT=$PWD; R=$OUT/append_fused_ab.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; git log --oneline -1; } > $R 2>&1
t0=$(date +%s)
export LD_LIBRARY_PATH=$ROOT/build-gpu-deps/cmocka/lib
GPU_STEPS="build kvcache" CUDA_ARCHS=90-real DEADLINE_S=200 bash scripts/gpu_check.sh > $OUT/gpu_check.out 2>&1
echo "gpu_check rc $? $(( $(date +%s)-t0 )) s" >> $R
tail -4 $OUT/gpu_check.out >> $R
grep -E "exit status|FAIL|failed|ERROR SUMMARY" $OUT/kvcache.log | head -30 >> $R
timeout 60 cmake --build build-gpu -j 16 --target kvcache_bench > /dev/null 2>&1
A() { echo "== $1" >> $R
  for s in 8,1,16384 8,32,8192 8,1,131072 1,128,8192; do
    FLASHC_CUDA_KVCACHE_APPEND=$2 timeout 40 build-gpu/kvcache_bench --shape $s --layouts 0,16 --append 2>&1 |
      grep -E '^\| [0-9]|^# append' >> $R
  done; }
A "fused 1" fused; A "kernel 1" kernel; A "serial 1" serial
A "serial 2" serial; A "kernel 2" kernel; A "fused 2" fused
echo "done $(( $(date +%s)-t0 )) s" >> $R
cat $R
