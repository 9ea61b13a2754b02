#!/usr/bin/env bash
B=build-gpu-carry; W=$OUT/r11; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q="--backend cuda --shape all --m 256,1024,4096 --scheme mxfp4,nvfp4,w4a8-fp8,w8a8-int8"
for r in 1 2; do
  CUDA_MODULE_LOADING=EAGER QMOE_CUDA_SYNC_CHECK=1 timeout 40 $B/qmoe bench $Q > /dev/null 2>$W/eq_$r.err; echo "eager Q $r rc $? $(el) $(grep -c bench: $W/eq_$r.err) rows; $(tail -n 1 $W/eq_$r.err | cut -c1-90)"
done
QMOE_CUDA_SYNC_CHECK=1 timeout 40 $B/qmoe bench $Q > /dev/null 2>$W/lq.err; echo "lazy Q rc $? $(el) $(grep -c bench: $W/lq.err) rows; $(tail -n 1 $W/lq.err | cut -c1-90)"
CUDA_LAUNCH_BLOCKING=1 timeout 40 $B/qmoe bench --backend cuda --shape deepseek-v3 --m 1024,4096 --scheme nvfp4 > /dev/null 2>$W/bq.err; echo "blocking ds rc $? $(el) $(tail -n 1 $W/bq.err | cut -c1-90)"
timeout 40 $B/qmoe bench --backend cuda --shape deepseek-v3 --m 1024,4096 --scheme nvfp4 > /dev/null 2>$W/dq.err; echo "default ds rc $? $(el) $(tail -n 1 $W/dq.err | cut -c1-90)"
cd $OUT && tar czf r11.tgz r11
