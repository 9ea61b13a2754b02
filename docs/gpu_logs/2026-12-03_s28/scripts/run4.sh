#!/usr/bin/env bash
# session 28, call 4 (the device time left): the h quantization in GEMM2 by its rule (at most two
# slots per expert). Select / decode tests; A/B QMOE_CUDA_H_QUANT_IN_GEMM2 0 against the rule on fp8
# M = 1 (every shape) and qwen3-30b-a3b M = 16 / 32 / 64 (the decode rows), twice.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
timeout 60 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeFormats/*:CudaMoe*Decode*' > $W/test_first.log 2>&1; rc=$?; echo "tests rc $rc $(el)"; tail -2 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
for rep in 1 2; do for v in 0 d; do
  e=""; [ $v = 0 ] && e="QMOE_CUDA_H_QUANT_IN_GEMM2=0"
  env $e timeout 40 $Q bench --backend cuda --shape all --m 1 --scheme fp8 --json $W/hq${v}_$rep.json > $W/hq${v}_$rep.md 2>$W/hq${v}_$rep.err; echo "hq$v rep $rep rc $? $(el)"
  env $e timeout 40 $Q bench --backend cuda --shape qwen3-30b-a3b --m 16,32,64 --scheme fp8 --json $W/hq${v}_q$rep.json > $W/hq${v}_q$rep.md 2>$W/hq${v}_q$rep.err; echo "hq$v q rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/hq0_*.json" "$W/hqd_*.json" > $W/compare_hq.txt 2>&1; grep -v '^|---' $W/compare_hq.txt | cut -c1-110
cd $OUT && tar czf r4.tgz r4
