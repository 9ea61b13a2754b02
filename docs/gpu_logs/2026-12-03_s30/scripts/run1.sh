#!/usr/bin/env bash
# session 30, call 1: GEMM1 prefetching GEMM2's touched experts into L2 (GemmParams::next_w,
# QMOE_CUDA_L2_NEXT): the selection / decode tests (bit identity with the prefetch off, against the
# reference); A/B at M = 1 on every shape for bf16 / fp8 / int4 / MXFP4 / NVFP4A16 / W4A8-fp8:
# 0 (off) against the rule (half the L2), three alternations, then 1 (whole L2) once.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeFormats/*' > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -3 $W/test.log; grep -B2 -A8 "Failure" $W/test.log | head -30
SCH=bf16,fp8,int4,mxfp4,nvfp4a16,w4a8-fp8
for rep in 1 2 3; do for v in r 0; do
  e=""; [ $v = 0 ] && e="QMOE_CUDA_L2_NEXT=0"
  env $e timeout 60 $Q bench --backend cuda --shape all --m 1 --scheme $SCH --json $W/l2${v}_$rep.json > $W/l2${v}_$rep.md 2>$W/l2${v}_$rep.err; echo "l2$v rep $rep rc $? $(el)"
done; done
QMOE_CUDA_L2_NEXT=1 timeout 60 $Q bench --backend cuda --shape all --m 1 --scheme $SCH --json $W/l21_1.json > $W/l21_1.md 2>$W/l21_1.err; echo "l21 rc $? $(el)"
python3 bench/compare_rows.py "$W/l20_*.json" "$W/l2r_*.json" > $W/compare_l2.txt 2>&1; grep -v '^|---' $W/compare_l2.txt | cut -c1-120
python3 bench/compare_rows.py "$W/l20_*.json" "$W/l21_*.json" > $W/compare_l2_all.txt 2>&1; tail -3 $W/compare_l2_all.txt
cd $OUT && tar czf r1.tgz r1
