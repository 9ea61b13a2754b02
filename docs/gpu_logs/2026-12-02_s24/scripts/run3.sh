#!/usr/bin/env bash
# session 24, call 3: the tile kernel's CTA pairs (Sm90Gemm::cluster2, QMOE_CUDA_PAIRS; on by
# default while unmeasured), their remote arrivals now without the MEMBAR.ALL.GPU of .release.cluster
# (r1 / r2: 0.66-0.90x) and the mailbox by st.async. Their test, the s23 direct-A test (not re-run after its last edit) and
# the persistent test first (stop on failure); A/B pairs off / on over fp8 / bf16 / fp8-block x every
# shape x M = 1024 / 4096, alternating twice; ncu of fp8 mixtral-8x7b M = 4096 both ways (time, L2
# bytes, tensor activity).
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.CtaPairs*:CudaSm90.DirectARows*:CudaSm90.Persistent*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r3.tgz r3; exit 1; fi
for rep in 1 2; do
  for v in 0 1; do
    QMOE_CUDA_PAIRS=$v timeout 80 $Q bench --backend cuda --shape all --m 1024,4096 --scheme fp8,bf16,fp8-block --json $W/p${v}_$rep.json > $W/p${v}_$rep.md 2>$W/p${v}_$rep.err; echo "pairs=$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/p0_*.json" "$W/p1_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-120
for v in 0 1; do
  QMOE_CUDA_PAIRS=$v timeout 60 ncu --clock-control none -k 'regex:sm90_moe' -c 2 --metrics gpu__time_duration.sum,lts__t_bytes.sum,dram__bytes_read.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active $Q bench --backend cuda --shape mixtral-8x7b --m 4096 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_fp8_mixtral_4096_p$v.txt 2>&1; echo "ncu pairs=$v rc $? $(el)"
  grep -E "sm90_moe|duration|lts__t_bytes|dram__bytes|tensor_op" $W/ncu_fp8_mixtral_4096_p$v.txt | cut -c1-140 | head -14
done
cd $OUT && tar czf r3.tgz r3
