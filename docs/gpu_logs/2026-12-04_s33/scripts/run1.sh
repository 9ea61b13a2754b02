#!/usr/bin/env bash
# session 33, call 1: the bulk decode kernel's per-chunk column scales / zero points from
# item-contiguous tables (DevProj::scale_t), one bulk copy per item, against the per-lane 4-byte
# cp.async gathers (QMOE_CUDA_D90_TILED_SCALES=0). Decode / selection tests with the switch on and
# off (the new CudaDecode.TiledScalesMatchGathers runs both itself); A/B in one build, 0 against 1,
# M = 1 / 16 of int4 (g128) / int4-g32 / w4a8-fp8 / int8 (channel: not affected, the control) on
# every shape, three alternations; a -DQMOE_D90_TRACE build (qmoe_trace): per-block timelines at
# M = 1 int4, 0 and 1, when that build travels; then the whole CUDA suite.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1
F='Select*:CudaDecode*:DecodeSweep*:DecodeFormats*:CudaSm90.OneToken*'
for v in 1 0; do
  QMOE_CUDA_D90_TILED_SCALES=$v timeout 90 $B/test_cuda --gtest_brief=1 --gtest_filter="$F" > $W/test_$v.log 2>&1; echo "tests $v rc $? $(el)"; tail -1 $W/test_$v.log; grep -B2 -A8 "Failure" $W/test_$v.log | head -30
done
for rep in 1 2 3; do for v in off on; do
  e=0; [ $v = on ] && e=1
  QMOE_CUDA_D90_TILED_SCALES=$e timeout 45 $B/qmoe bench --backend cuda --shape all --m 1,16 --scheme int4,int4-g32,w4a8-fp8,int8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/off_*.json" "$W/on_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-100
# the whole CUDA suite with the tables on (the default)
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test_all.log 2>&1; echo "all tests rc $? $(el)"; tail -3 $W/test_all.log; grep -B2 -A8 "Failure" $W/test_all.log | head -30
if [ -x $B/qmoe_trace ]; then
  for v in 0 1; do
    QMOE_CUDA_D90_TILED_SCALES=$v QMOE_D90_TRACE_FILE=$W/trace_$v.txt timeout 60 $B/qmoe_trace bench --backend cuda --shape all --m 1 --scheme int4,int4-g32 --json $W/trace_$v.json > $W/trace_$v.md 2>&1; echo "trace $v rc $? $(el)"
    python3 bench/d90_trace.py $W/trace_$v.txt > $W/trace_summary_$v.txt 2>&1
  done
  grep -E "^row|rows->data|issue0->data|item0 atoms" $W/trace_summary_0.txt | head -24
  grep -E "^row|rows->data|issue0->data|item0 atoms" $W/trace_summary_1.txt | head -24
fi
cd $OUT && tar czf r1.tgz r1
