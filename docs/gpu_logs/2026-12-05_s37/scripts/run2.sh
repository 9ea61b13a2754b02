#!/usr/bin/env bash
# session 37, call 2 (call 1, run1.sh, got no machine): int4 WNA16 on the 16-bit tile kernel with the
# codes converted to 16-bit operands in shared memory (Sm90Gemm::cv, QMOE_CUDA_WQ_CV, default on).
# (a) its tests (image read back, layer against the reference); (b) A/B in one binary, CV on against
# QMOE_CUDA_WQ_CV=0 (the wq kernel), int4 g128 / channel at M = 256 / 1024 / 4096 on every shape, two
# alternations; (c) s36's token-tile rule (64-row wq tiles up to 64 rows with >= 64 experts) against
# QMOE_CUDA_WQ_TN=128 at qwen3-30b-a3b M = 1024 for the other wq schemes, two alternations; (d) the
# whole GPU suite; (e) on an H200, the anchor rows if the time allows.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 120 $B/test_cuda --gtest_filter='CudaSm90.ConvertedInt4*' > $W/cv_tests.log 2>&1; echo "cv tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" $W/cv_tests.log | head; grep -B2 -A12 "Failure" $W/cv_tests.log | head -60
(cd $OUT && tar czf r2.tgz r2)
for rep in 1 2; do
  for v in 0 1; do
    export QMOE_CUDA_WQ_CV=$v
    timeout 90 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme int4,int4-ch --json $W/cv${v}_$rep.json > $W/cv${v}_$rep.md 2>$W/cv${v}_$rep.err
    echo "cv $v rep $rep rc $? $(el)"; tail -2 $W/cv${v}_$rep.err
  done
done
unset QMOE_CUDA_WQ_CV
python3 bench/compare_rows.py "$W/cv0_*.json" "$W/cv1_*.json" > $W/compare_cv.txt 2>&1; cat $W/compare_cv.txt
(cd $OUT && tar czf r2.tgz r2)
S=int8,w4a8-int8,w4a8-fp8,nvfp4,nvfp4a16,mxfp4
for rep in 1 2; do
  for v in 128 rule; do
    if [ $v = rule ]; then unset QMOE_CUDA_WQ_TN; else export QMOE_CUDA_WQ_TN=$v; fi
    timeout 60 $B/qmoe bench --backend cuda --shape qwen3-30b-a3b --m 1024 --scheme $S --json $W/t${v}_$rep.json > $W/t${v}_$rep.md 2>$W/t${v}_$rep.err
    echo "tn $v rep $rep rc $? $(el)"
  done
done
unset QMOE_CUDA_WQ_TN
python3 bench/compare_rows.py "$W/t128_*.json" "$W/trule_*.json" > $W/compare_tn.txt 2>&1; cat $W/compare_tn.txt
(cd $OUT && tar czf r2.tgz r2)
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 280 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -12
(cd $OUT && tar czf r2.tgz r2)
if grep -q H200 $W/gpu.txt && [ $(el) -lt 380 ]; then
  timeout $(( 570 - $(el) )) $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
  python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -12
fi
cd $OUT && tar czf r2.tgz r2
