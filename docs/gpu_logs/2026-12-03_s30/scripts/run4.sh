#!/usr/bin/env bash
# session 30, call 4: fp8 GEMM2's h staging with its first chunk loaded before the scales and RowDiv
# instead of the division (moe_decode.cu stage_rows_q): the selection / decode tests (bit identity
# with act_prep's rows); A/B against 2464103 (qmoe_base) at fp8 M = 1 / 16 on every shape, three
# alternations; then the new build's anchor rows (bf16 / fp8 / int4 / W8A8-int8, MXFP4 / NVFP4A16 /
# W4A8-fp8 decode rows) and the C ABI / Python phases.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeFormats/*:CudaSm90.OneToken*' > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -3 $W/test.log; grep -B2 -A8 "Failure" $W/test.log | head -30
for rep in 1 2 3; do for v in base new; do
  q=$B/qmoe; [ $v = base ] && q=$B/qmoe_base
  timeout 40 $q bench --backend cuda --shape all --m 1,16 --scheme fp8 --json $W/hq_${v}_$rep.json > $W/hq_${v}_$rep.md 2>$W/hq_${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/hq_base_*.json" "$W/hq_new_*.json" > $W/compare_hq.txt 2>&1; grep -v '^|---' $W/compare_hq.txt | cut -c1-110
timeout 200 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -12
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64 --scheme mxfp4,nvfp4a16,w4a8-fp8 --json $W/fp4.json > $W/fp4.md 2>$W/fp4.err; echo "fp4 rows rc $? $(el)"
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
cd $OUT && tar czf r4.tgz r4
