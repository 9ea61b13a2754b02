#!/usr/bin/env bash
# session 27, call 4: the balanced plan with its ring depth (up to 3 stages that keep the blocks per
# SM). Decode tests, then the whole CUDA suite; A/B QMOE_CUDA_DECODE90_BALANCE 0 / 1 alternating
# twice (fp8 / int8 / bf16, every shape, M = 1 / 16 / 64) and once for int4 / MXFP4; C ABI / Python;
# anchor rows of bf16, fp8, int4, w8a8-int8.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 100 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeFormats/*' > $W/test_first.log 2>&1; rc=$?; echo "decode tests rc $rc $(el)"; tail -2 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r4.tgz r4; exit 1; fi
timeout 280 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
for rep in 1 2; do
  for v in 0 1; do
    QMOE_CUDA_DECODE90_BALANCE=$v timeout 80 $Q bench --backend cuda --shape all --m 1,16,64 --scheme fp8,int8,bf16 --json $W/b${v}_$rep.json > $W/b${v}_$rep.md 2>$W/b${v}_$rep.err; echo "b$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/b0_*.json" "$W/b1_*.json" > $W/compare01.txt 2>&1; grep -v '^|---' $W/compare01.txt | cut -c1-100
for v in 0 1; do
  QMOE_CUDA_DECODE90_BALANCE=$v timeout 60 $Q bench --backend cuda --shape all --m 1,16 --scheme int4,mxfp4 --json $W/f${v}.json > $W/f${v}.md 2>$W/f${v}.err; echo "f$v rc $? $(el)"
done
python3 bench/compare_rows.py "$W/f0.json" "$W/f1.json" > $W/comparef.txt 2>&1; tail -2 $W/comparef.txt
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
timeout 150 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -8
cd $OUT && tar czf r4.tgz r4
