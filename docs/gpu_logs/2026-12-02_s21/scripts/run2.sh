#!/usr/bin/env bash
# session 21, call 2: the Hopper tile kernel persistent (Sm90Gemm::persistent: one CTA per SM walks
# the tiles, its ring of stages running on across them, so the next tile's stages load during an
# epilogue; QMOE_CUDA_PERSIST=0 = one CTA per tile). The whole CUDA suite (with the new
# CudaSm90.PersistentTileKernelMatchesOneCtaPerTile), C ABI and Python; A/B per tile / persistent over
# bf16 / fp8 / INT8 / fp8-block x every shape x M = 256 / 1024 / 4096, alternating twice; ncu of
# qwen3-30b-a3b fp8 and gpt-oss-120b INT8 at M = 4096, both settings.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
timeout 60 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.Persistent*:CudaSm90.PrefillPath*:CudaSm90.TailBlocks*' > $W/test_first.log 2>&1; echo "first tests rc $? $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
for rep in 1 2; do
  for v in tile pers; do
    e=QMOE_X=1; [ $v = tile ] && e=QMOE_CUDA_PERSIST=0
    env $e timeout 60 $Q bench --backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8,fp8-block --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/tile_*.json" "$W/pers_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-150
for c in "fp8 qwen3-30b-a3b" "w8a8-int8 gpt-oss-120b"; do set -- $c; for v in tile pers; do
  e=QMOE_X=1; [ $v = tile ] && e=QMOE_CUDA_PERSIST=0
  env $e timeout 40 ncu --clock-control none -k 'regex:sm90_moe|reduce_' -c 3 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $Q bench --backend cuda --shape $2 --m 4096 --scheme $1 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2_$v.txt 2>&1; echo "ncu $1 $2 $v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_$1_$2_$v.txt 2>&1 | grep -E "moe_gemm|reduce|sum"
done; done
cd $OUT && tar czf r2.tgz r2
