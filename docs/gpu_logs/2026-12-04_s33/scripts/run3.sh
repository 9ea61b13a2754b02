#!/usr/bin/env bash
# session 33, call 3: GEMM2's K splits by the balanced fill rule (config.h select_decode; switch
# QMOE_CUDA_FILL_BALANCE, 0 = the doubling rule alone). Selection / decode tests with the switch on
# and off; A/B in one build, 0 against 1, M = 1 of int4 / int4-g32 / MXFP4 / NVFP4A16 / W4A8-fp8 /
# fp8 / bf16 on every shape (the rule changes llama4-scout's and gpt-oss-120b's GEMM2), three
# alternations; the whole CUDA suite (switch on); the anchor rows.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1
F='Select*:CudaDecode*:DecodeSweep*:DecodeFormats*:CudaSm90.OneToken*'
for v in 1 0; do
  QMOE_CUDA_FILL_BALANCE=$v timeout 90 $B/test_cuda --gtest_brief=1 --gtest_filter="$F" > $W/test_$v.log 2>&1; echo "tests $v rc $? $(el)"; tail -1 $W/test_$v.log; grep -B2 -A8 "Failure" $W/test_$v.log | head -30
done
for rep in 1 2 3; do for v in off on; do
  e=0; [ $v = on ] && e=1
  QMOE_CUDA_FILL_BALANCE=$e timeout 45 $B/qmoe bench --backend cuda --shape all --m 1 --scheme int4,int4-g32,mxfp4,nvfp4a16,w4a8-fp8,fp8,bf16 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/off_*.json" "$W/on_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-100
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test_all.log 2>&1; echo "all tests rc $? $(el)"; tail -3 $W/test_all.log; grep -B2 -A8 "Failure" $W/test_all.log | head -30
timeout 150 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -12
cd $OUT && tar czf r3.tgz r3
