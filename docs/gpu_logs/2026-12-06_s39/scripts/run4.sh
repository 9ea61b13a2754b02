#!/usr/bin/env bash
# session 39, call 3 (build of the fp4 256-row rule, config.h kWq256RowsFp4 = 128; a variant with the
# 128-row wq tiles' ring one stage deeper, -DQMOE_WQ_STAGES=5, did not fit the carry's 64 MiB beside
# this build and was dropped):
# (a) the selection / wide-tile / wq tile tests; (c) int4 at 128 rows per expert on this H200, forced
# 256 against 128 (s38's H100 read 0.97-1.04x), two alternations; (d) fp4 rows at the new rule, every
# M; (e) the whole GPU suite (test_cuda, C ABI, Python).
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 120 $B/test_cuda --gtest_filter='SelectSm90.*:CudaSm90.WideTokenTiles:CudaSm90.QuantizedWeightTokenTiles' > $W/wide_tests.log 2>&1; echo "wide tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED \]" $W/wide_tests.log | head; grep -B2 -A12 "Failure" $W/wide_tests.log | head -40
(cd $OUT && tar czf r4.tgz r4)
for rep in 1 2; do
  for v in 128 256; do
    QMOE_CUDA_WQ_TN=$v timeout 60 $B/qmoe bench --backend cuda --shape deepseek-v3,gpt-oss-120b --m 4096 --scheme int4 --json $W/i4tn${v}_$rep.json > $W/i4tn${v}_$rep.md 2>$W/i4tn${v}_$rep.err
    QMOE_CUDA_WQ_TN=$v timeout 60 $B/qmoe bench --backend cuda --shape llama4-scout,qwen3-30b-a3b --m 2048 --scheme int4 --json $W/i4tn${v}b_$rep.json > $W/i4tn${v}b_$rep.md 2>$W/i4tn${v}b_$rep.err
    echo "int4 tn $v rep $rep rc $? $(el)"
  done
  (cd $OUT && tar czf r4.tgz r4)
done
python3 bench/compare_rows.py "$W/i4tn128*.json" "$W/i4tn256*.json" > $W/compare_i4tn.txt 2>&1; cat $W/compare_i4tn.txt
timeout 120 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme mxfp4,nvfp4a16,nvfp4 --json $W/fp4_rows.json > $W/fp4_rows.md 2>$W/fp4_rows.err; echo "fp4 rows rc $? $(el)"
grep -h -o '"kernel": "[^"]*"' $W/fp4_rows.json | sort | uniq -c | head -20
(cd $OUT && tar czf r4.tgz r4)
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout $(( 585 - $(el) )) bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -8
cd $OUT && tar czf r4.tgz r4
