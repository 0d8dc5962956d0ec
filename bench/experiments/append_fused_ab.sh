#!/usr/bin/env bash
# One device call (about 180 s after the start): the ways a KV-cache call with an append runs on Hopper
# (FLASHC_CUDA_KVCACHE_APPEND, kvcache_backend.cu): fused (the attention's CTAs write the new rows and rotate Q
# themselves) and kernel (the append kernel, the attention reading the older rows before it ends); with OLD_TREE
# set (a source tree, e.g. `git archive <rev> | tar -x -C build-ab/old`, carried), that tree's kvcache_bench runs
# beside them (in FLASHC_CUDA_KVCACHE_APPEND=$OLD_MODE, default kernel), so the plain rows of both kernels are
# compared in the same call.
#   carry build-gpu-deps (cmocka) and OLD_TREE; run from the repository root.
# 1. build with tests; gpu_check's kvcache step: test_cuda_kvcache in full on the default kernels (fused), quick
#    under each forced kernel, with kernel_append and serial_append, under memcheck, and pytest kvcache / paged;
# 2. kvcache_bench --append (plain, +append, +append+rotary), two rounds in turned order, on a short call
#    (1 x 16384), a full wave (32 x 8192), 1 x 131072 and MQA 128 x 8192, contiguous and paged 16.
set -uo pipefail
ROOT=$PWD; R=$OUT/append_fused_ab.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > $R 2>&1
t0=$(date +%s)
export LD_LIBRARY_PATH=$ROOT/build-gpu-deps/cmocka/lib
if [ -n "${OLD_TREE:-}" ]; then
  ( G=(); command -v ninja > /dev/null && G=(-G Ninja)
    cmake -S "$OLD_TREE" -B build-old "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DFLASHC_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90-real > $OUT/build_old.log 2>&1 &&
    timeout 300 cmake --build build-old -j 8 --target kvcache_bench >> $OUT/build_old.log 2>&1; echo "old build rc $?" >> $R ) &
fi
GPU_STEPS="build kvcache" CUDA_ARCHS=90-real DEADLINE_S=240 bash scripts/gpu_check.sh > $OUT/gpu_check.out 2>&1
echo "gpu_check rc $? $(( $(date +%s)-t0 )) s" >> $R
tail -4 $OUT/gpu_check.out >> $R
grep -E "exit status|FAIL|failed|ERROR SUMMARY" $OUT/kvcache.log | head -30 >> $R
timeout 60 cmake --build build-gpu -j 16 --target kvcache_bench > /dev/null 2>&1
wait
A() { echo "== $1" >> $R
  for s in 8,1,16384 8,32,8192 8,1,131072 1,128,8192; do
    FLASHC_CUDA_KVCACHE_APPEND=$3 timeout 40 $2/kvcache_bench --shape $s --layouts 0,16 --append 2>&1 |
      grep -E '^\| [0-9]|^# append' >> $R
  done; }
OLD=build-old; [ -x $OLD/kvcache_bench ] || OLD=""
OM=${OLD_MODE:-kernel}
A "fused 1" build-gpu fused; [ -n "$OLD" ] && A "old 1" $OLD $OM
[ -n "$OLD" ] && A "old 2" $OLD $OM; A "fused 2" build-gpu fused
[ -z "$OLD" ] && { A "kernel 1" build-gpu kernel; A "kernel 2" build-gpu kernel; }
echo "done $(( $(date +%s)-t0 )) s" >> $R
cat $R
