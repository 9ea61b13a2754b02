#!/usr/bin/env bash
# session 15, call 1: the bulk decode kernel's K-group sums through mbarriers (red_full / red_free,
# no block barrier per item; the fourteenth session's next_decode_item_mbarriers.patch). Decode
# suites first, then the decode rows (M = 1 / 16 / 64, six schemes, every shape) A/B against
# qmoe_base (HEAD b58dd9e), alternating twice; then per-kernel ncu durations of two M = 1 layers.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaDecode*:DecodeFormats*:CudaSm90.OneToken*:Select*:CudaMoeEdges*' > $W/test_decode.log 2>&1; echo "test decode rc $? $(el)"; tail -2 $W/test_decode.log; grep -E "^\[  FAILED" $W/test_decode.log | head -20; grep -A5 "Failure" $W/test_decode.log | head -30
for rep in 1 2; do
  for v in base new; do
    timeout 110 $B/qmoe_$v bench --backend cuda --shape all --m 1,16,64 --scheme int4,nvfp4a16,mxfp4,w4a8-fp8,fp8,bf16 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
for c in "qwen3-30b-a3b int4" "llama4-scout int4" "gpt-oss-120b mxfp4"; do
  set -- $c
  timeout 60 ncu --clock-control none -k 'regex:align_|sm90_moe|reduce_|act_|moe_|route_' -c 8 --metrics gpu__time_duration.sum,dram__bytes_read.sum $B/qmoe_new bench --backend cuda --shape $1 --m 1 --scheme $2 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2.txt 2>&1; echo "ncu $c rc $? $(el)"
done
cd $OUT && tar czf r1.tgz r1
