#!/usr/bin/env bash
# session 24, call 4: the fp8 tile kernel's ring (r3's ncu: the CTA pairs cut its L2 bytes by 20%
# at the same 53-55% tensor activity, so L2 bandwidth is not its limit). kh1 build
# (-DQMOE_SM90_FP8_KH=1): one 128-k box per stage, 6 stages (8 on 64-row M-blocks) instead of 3
# stages of two boxes (the same 192 KiB, more of it in flight). fp8 / fp8-block x every shape x
# M = 256 / 1024 / 4096: base and kh1, pairs off / on, alternating twice.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
for rep in 1 2; do
  for v in b0 b1 k0 k1; do
    Q=$B/qmoe; [ ${v:0:1} = k ] && Q=$B/qmoe_kh1
    QMOE_CUDA_PAIRS=${v:1:1} timeout 80 $Q bench --backend cuda --shape all --m 256,1024,4096 --scheme fp8,fp8-block --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
for v in b1 k0 k1; do python3 bench/compare_rows.py "$W/b0_*.json" "$W/${v}_*.json" > $W/compare_$v.txt 2>&1; echo "== b0 vs $v"; grep -v '^|---' $W/compare_$v.txt | cut -c1-80; done
python3 bench/compare_rows.py "$W/k0_*.json" "$W/k1_*.json" > $W/compare_k0_k1.txt 2>&1; echo "== k0 vs k1"; tail -2 $W/compare_k0_k1.txt
for v in b0 k0; do
  Q=$B/qmoe; [ ${v:0:1} = k ] && Q=$B/qmoe_kh1
  QMOE_CUDA_PAIRS=0 timeout 60 ncu --clock-control none -k 'regex:sm90_moe' -c 2 --metrics gpu__time_duration.sum,lts__t_bytes.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active $Q bench --backend cuda --shape mixtral-8x7b --m 4096 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_fp8_mixtral_4096_$v.txt 2>&1; echo "ncu $v rc $? $(el)"
  grep -E "duration|tensor_op" $W/ncu_fp8_mixtral_4096_$v.txt | cut -c1-140 | head -4
done
cd $OUT && tar czf r4.tgz r4
