#!/usr/bin/env bash
# session 34, call 1: biased int4 codes in the bulk decode kernel (QMOE_D90_BIAS, build-time; qmoe_bias0
# = the earlier form). Decode / selection tests (the new CudaDecode.BiasedInt4CodesWithOffsetActivations
# and s33's unrun CudaDecode.TiledScalesMatchGathers among them); A/B bias0 against bias1 at M = 1 / 16
# of int4 (g128) / int4-g32 / int4 channel on every shape, two alternations; ncu of llama4-scout
# int4 M = 1 (both builds); the int4 anchor rows; the whole CUDA suite, C ABI.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
chmod +x $B/qmoe_bias0
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
F='Select*:CudaDecode*:DecodeSweep*:DecodeFormats*:CudaSm90.OneToken*'
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter="$F" > $W/test_decode.log 2>&1; echo "decode tests rc $? $(el)"; tail -1 $W/test_decode.log; grep -B2 -A10 "Failure" $W/test_decode.log | head -40
for rep in 1 2; do for v in bias0 bias1; do
  q=$B/qmoe; [ $v = bias0 ] && q=$B/qmoe_bias0
  timeout 90 $q bench --backend cuda --shape all --m 1,16 --scheme int4,int4-g32,int4-ch --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/bias0_*.json" "$W/bias1_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-110
for v in bias0 bias1; do
  q=$B/qmoe; [ $v = bias0 ] && q=$B/qmoe_bias0
  timeout 90 ncu --clock-control none -k regex:moe_decode90 -c 2 --section SpeedOfLight --section SchedulerStats --section LaunchStats --metrics smsp__inst_executed.sum \
    $q bench --backend cuda --shape llama4-scout --m 1 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$v.txt 2>&1; echo "ncu $v rc $? $(el)"
  grep -E "moe_decode90|Duration|DRAM Through|Issued Warp|inst_executed" $W/ncu_$v.txt | head -12
done
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024 --scheme int4 --json $W/int4.json > $W/int4.md 2>$W/int4.err; echo "int4 anchors rc $? $(el)"
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test_all.log 2>&1; echo "all tests rc $? $(el)"; tail -3 $W/test_all.log; grep -B2 -A8 "Failure" $W/test_all.log | head -30
timeout 60 $B/test_c_api > $W/test_c_api.log 2>&1; echo "c api rc $? $(el)"; tail -2 $W/test_c_api.log
cd $OUT && tar czf r1.tgz r1
