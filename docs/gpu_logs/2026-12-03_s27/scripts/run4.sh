#!/usr/bin/env bash
# session 27, call 4 (cut to the device time left): the balanced plan with its ring depth (up to 3
# stages that keep the blocks per SM). Decode tests, then the whole CUDA suite; A/B
# QMOE_CUDA_DECODE90_BALANCE 0 / 1 once each (fp8 / int8 / bf16 / int4 / MXFP4, every shape, M = 1 /
# 16 / 64); C ABI / Python; bf16 + fp8 anchor rows.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 100 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeFormats/*' > $W/test_first.log 2>&1; rc=$?; echo "decode tests rc $rc $(el)"; tail -2 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r4.tgz r4; exit 1; fi
timeout 250 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
for v in 0 1; do
  QMOE_CUDA_DECODE90_BALANCE=$v timeout 80 $Q bench --backend cuda --shape all --m 1,16,64 --scheme fp8,int8,bf16,int4,mxfp4 --json $W/b${v}.json > $W/b${v}.md 2>$W/b${v}.err; echo "b$v rc $? $(el)"
done
python3 bench/compare_rows.py "$W/b0.json" "$W/b1.json" > $W/compare01.txt 2>&1; grep -v '^|---' $W/compare01.txt | cut -c1-100
OUT=$W QMOE_GPU_PHASES="capi python" timeout 40 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
timeout 60 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -8
cd $OUT && tar czf r4.tgz r4
