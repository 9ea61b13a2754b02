#!/usr/bin/env bash
# session 27, call 2: the balance rule refined after r1 (longer slabs only where blocks walk >= 4
# items; 16-bit weights keep two reduction buffers). Whole CUDA suite; A/B QMOE_CUDA_DECODE90_BALANCE
# 0 / 1 alternating twice; ncu source-level stall samples of the fp8 bulk decode GEMM1 (qwen3-30b-a3b
# M = 16); C ABI / Python; bf16 + fp8 anchor rows.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 280 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
for rep in 1 2; do
  for v in 0 1; do
    QMOE_CUDA_DECODE90_BALANCE=$v timeout 70 $Q bench --backend cuda --shape qwen3-30b-a3b,deepseek-v3,mixtral-8x7b --m 1,16,64 --scheme fp8,bf16,int8,w8a8-int8 --json $W/b${v}_$rep.json > $W/b${v}_$rep.md 2>$W/b${v}_$rep.err; echo "b$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/b0_*.json" "$W/b1_*.json" > $W/compare01.txt 2>&1; grep -v '^|---' $W/compare01.txt | cut -c1-110
timeout 90 ncu --clock-control none --set full --import-source yes -k 'regex:decode90' -c 1 -o $W/dec_qwen3_fp8_16 $Q bench --backend cuda --shape qwen3-30b-a3b --m 16 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_run.txt 2>&1; echo "ncu full rc $? $(el)"
timeout 30 ncu --import $W/dec_qwen3_fp8_16.ncu-rep --page source --csv --print-source sass > $W/ncu_sass.csv 2>&1; echo "sass rc $? $(el)"
xz -T4 $W/ncu_sass.csv; rm -f $W/dec_qwen3_fp8_16.ncu-rep
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
timeout 120 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -8
cd $OUT && tar czf r2.tgz r2
