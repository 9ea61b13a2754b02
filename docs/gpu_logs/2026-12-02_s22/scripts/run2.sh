#!/usr/bin/env bash
# session 22, call 2: fp8 promotions pipelined against the QGMMA groups on the Hopper tile kernel
# (Sm90Gemm::fp8_pipe; QMOE_CUDA_FP8_PIPE=0 = both groups drained per stage). The whole CUDA suite,
# C ABI and Python; A/B over fp8 / fp8-block x every shape x M = 64 / 256 / 1024 / 4096,
# alternating twice; ncu of qwen3-30b-a3b and gpt-oss-120b fp8 at M = 4096, both settings; the
# anchor rows (bf16 / fp8 / int4 x M = 1-4096) and backend II's target rows at this commit.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv > $W/gpu.txt 2>&1
timeout 60 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.Fp8Pipelined*' > $W/test_first.log 2>&1; echo "first tests rc $? $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
for rep in 1 2; do
  for v in drain pipe; do
    e=QMOE_X=1; [ $v = drain ] && e=QMOE_CUDA_FP8_PIPE=0
    env $e timeout 60 $Q bench --backend cuda --shape all --m 64,256,1024,4096 --scheme fp8,fp8-block --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/drain_*.json" "$W/pipe_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-150
for sh in qwen3-30b-a3b gpt-oss-120b; do for v in drain pipe; do
  e=QMOE_X=1; [ $v = drain ] && e=QMOE_CUDA_FP8_PIPE=0
  env $e timeout 30 ncu --clock-control none -k 'regex:sm90_moe|reduce_' -c 3 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active $Q bench --backend cuda --shape $sh --m 4096 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_fp8_${sh}_$v.txt 2>&1; echo "ncu fp8 $sh $v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_fp8_${sh}_$v.txt 2>&1 | grep -E "moe_|reduce|sum"
  grep -E "gmma_cycles_active" $W/ncu_fp8_${sh}_$v.txt | head -3
done; done
timeout 120 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
timeout 90 $Q bench --backend cuda --shape all --m 1,16,4096 --scheme nvfp4a16,mxfp4,w4a8-fp8,w8a8-int8 --json $W/b2.json > $W/b2.md 2>$W/b2.err; echo "backend II rows rc $? $(el)"
cd $OUT && tar czf r2.tgz r2
