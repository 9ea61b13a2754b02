#!/usr/bin/env bash
# session 21, call 1: fp8 block scales by tile half now the default (first device run of
# CudaSm90.Fp8BlockScalesByTileHalf), and the top-k sum in GEMM2's epilogue (Sm90Gemm::sum_topk,
# default on the tile kernel where top_k > 1; QMOE_CUDA_TOPK_SUM=0 = per-slot rows + reduce).
# The whole CUDA suite, the C ABI and Python phases; A/B sum off / on over bf16 / fp8 / INT8 /
# fp8-block x every shape x M = 256 / 1024 / 4096, alternating twice; per-kernel ncu of qwen3-30b-a3b
# fp8 and gpt-oss-120b INT8 at M = 4096, both settings.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv > $W/gpu.txt 2>&1
timeout 280 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 100 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
for rep in 1 2; do
  for v in off on; do
    e=QMOE_X=1; [ $v = off ] && e=QMOE_CUDA_TOPK_SUM=0
    env $e timeout 100 $Q bench --backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8,fp8-block --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/off_*.json" "$W/on_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-150
for c in "fp8 qwen3-30b-a3b" "w8a8-int8 gpt-oss-120b"; do set -- $c; for v in off on; do
  e=QMOE_X=1; [ $v = off ] && e=QMOE_CUDA_TOPK_SUM=0
  env $e timeout 60 ncu --clock-control none -k 'regex:align_|sm90_moe|sm90_gather|sm90_stream|reduce_|act_|moe_|route_' -c 10 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $Q bench --backend cuda --shape $2 --m 4096 --scheme $1 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2_$v.txt 2>&1; echo "ncu $1 $2 $v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_$1_$2_$v.txt 2>&1 | grep -E "moe_gemm|reduce|sum"
done; done
cd $OUT && tar czf r1.tgz r1
