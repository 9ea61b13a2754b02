#!/usr/bin/env bash
# session 33, call 6: the streaming kernel's fp8 promotion pipelined (stage kt's QGMMAs in flight
# while kt + 1 is awaited; switch QMOE_CUDA_STREAM_FP8_PIPE, 0 = stage by stage). r5's ncu: at
# llama4-scout fp8 M = 16 its GEMMs read DRAM at 91 / 89% of peak, the bf16 ones at 95 / 95%.
# Tests (the stream kernel's, with the bit-identity check, and the selection suite); A/B 0 against 1,
# fp8 at M = 16 / 64 / 256 on every shape (the stream kernel runs llama4-scout M = 16 / 64 and
# mixtral-8x7b M = 16; the other rows are the control), three alternations; ncu of the same GEMMs.
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
cuobjdump --dump-resource-usage $B/qmoe 2>/dev/null | grep -A1 "sm90_stream_kernel" | grep -E "Function|REG|STACK" > $W/stream_resources.txt; grep -c . $W/stream_resources.txt; grep -B1 -E "STACK:[1-9]|LOCAL:[1-9]" $W/stream_resources.txt | head -8
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.Stream*:Select*:CudaSm90.OneToken*' > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -1 $W/test.log; grep -B2 -A8 "Failure" $W/test.log | head -30
for rep in 1 2 3; do for v in off on; do
  e=0; [ $v = on ] && e=1
  QMOE_CUDA_STREAM_FP8_PIPE=$e timeout 45 $B/qmoe bench --backend cuda --shape all --m 16,64,256 --scheme fp8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/off_*.json" "$W/on_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-100
timeout 100 ncu --clock-control none -k 'regex:sm90_stream' -c 2 --section SpeedOfLight \
  $B/qmoe bench --backend cuda --shape llama4-scout --m 16 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_stream_fp8.txt 2>&1; echo "ncu rc $? $(el)"
grep -E "Duration|DRAM Throughput" $W/ncu_stream_fp8.txt | head -8
cd $OUT && tar czf r6.tgz r6
