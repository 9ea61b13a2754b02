#!/usr/bin/env bash
# session 22, call 1: the persistent tile kernel (session 21's r3 again: its logs were lost with
# that session) and the one-CTA wq kernels made persistent the same way (Sm90Gemm::tile_counter:
# CTA b takes tile b, then gridDim.x + atomicAdd(counter, 1)). QMOE_CUDA_PERSIST=0 = one CTA per
# tile. The whole CUDA suite, C ABI and Python; A/B over bf16 / fp8 / INT8 / fp8-block (tile
# kernel) and int4 / NVFP4A16 / MXFP4 / W4A8-fp8 / NVFP4 (wq kernel) x every shape x M = 64 / 256 /
# 1024 / 4096, alternating twice; ncu of qwen3-30b-a3b int4 and gpt-oss-120b MXFP4 at M = 4096.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
timeout 60 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.Persistent*:CudaSm90.W4A8*:CudaSm90.Wq*' > $W/test_first.log 2>&1; echo "first tests rc $? $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
for rep in 1 2; do
  for v in tile pers; do
    e=QMOE_X=1; [ $v = tile ] && e=QMOE_CUDA_PERSIST=0
    env $e timeout 70 $Q bench --backend cuda --shape all --m 64,256,1024,4096 --scheme bf16,fp8,w8a8-int8,fp8-block --json $W/${v}_a$rep.json > $W/${v}_a$rep.md 2>$W/${v}_a$rep.err; echo "$v a$rep rc $? $(el)"
    env $e timeout 90 $Q bench --backend cuda --shape all --m 64,256,1024,4096 --scheme int4,nvfp4a16,mxfp4,w4a8-fp8,nvfp4 --json $W/${v}_b$rep.json > $W/${v}_b$rep.md 2>$W/${v}_b$rep.err; echo "$v b$rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/tile_a*.json" "$W/pers_a*.json" > $W/compare_a.txt 2>&1; grep -v '^|---' $W/compare_a.txt | cut -c1-150
python3 bench/compare_rows.py "$W/tile_b*.json" "$W/pers_b*.json" > $W/compare_b.txt 2>&1; grep -v '^|---' $W/compare_b.txt | cut -c1-150
for c in "int4 qwen3-30b-a3b" "mxfp4 gpt-oss-120b"; do set -- $c; for v in tile pers; do
  e=QMOE_X=1; [ $v = tile ] && e=QMOE_CUDA_PERSIST=0
  env $e timeout 30 ncu --clock-control none -k 'regex:sm90_moe|reduce_' -c 3 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $Q bench --backend cuda --shape $2 --m 4096 --scheme $1 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2_$v.txt 2>&1; echo "ncu $1 $2 $v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_$1_$2_$v.txt 2>&1 | grep -E "moe_|reduce|sum"
done; done
cd $OUT && tar czf r1.tgz r1
