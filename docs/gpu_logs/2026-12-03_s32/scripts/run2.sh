#!/usr/bin/env bash
# session 32, call 2: GEMM2's K split on the Hopper tile kernel (Sm90Gemm::ksplit). Tests (the new
# KSplit test, the selection rules, the tile kernels' switch tests); then A/B in one build,
# QMOE_CUDA_SM90_KSPLIT=0 (never) against 2 (wherever K allows), bf16 / fp8 / w8a8-int8 at M = 256 /
# 1024 / 4096 on every shape, twice; HEAD's build (qmoe_head) once as the control of the split-off form.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaSm90.*' > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -3 $W/test.log; grep -B2 -A8 "Failure" $W/test.log | head -30
S="--backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8"
for rep in 1 2; do for v in off split; do
  e=0; [ $v = split ] && e=2
  QMOE_CUDA_SM90_KSPLIT=$e timeout 80 $B/qmoe bench $S --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
timeout 80 $B/qmoe_head bench $S --json $W/head_1.json > $W/head_1.md 2>$W/head_1.err; echo "head rc $? $(el)"
python3 bench/compare_rows.py "$W/off_*.json" "$W/split_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-90
python3 bench/compare_rows.py "$W/head_*.json" "$W/off_*.json" > $W/compare_head.txt 2>&1; tail -2 $W/compare_head.txt
cd $OUT && tar czf r2.tgz r2
