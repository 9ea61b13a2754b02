#!/usr/bin/env bash
# session 22, call 3: the tile kernel's wide epilogue stores (Sm90Gemm::wide_store: 4 columns per
# lane after a lane-pair swap; QMOE_CUDA_WIDE_STORE=0 = 2 columns per lane as the accumulators lie).
# The whole CUDA suite, C ABI and Python; A/B over bf16 / fp8 / INT8 / fp8-block x every shape x
# M = 256 / 1024 / 4096, alternating twice; ncu of qwen3-30b-a3b fp8 and gpt-oss-120b INT8 at M = 4096.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
timeout 60 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.WideEpilogue*' > $W/test_first.log 2>&1; echo "first tests rc $? $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
for rep in 1 2; do
  for v in narrow wide; do
    e=QMOE_X=1; [ $v = narrow ] && e=QMOE_CUDA_WIDE_STORE=0
    env $e timeout 60 $Q bench --backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8,fp8-block --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/narrow_*.json" "$W/wide_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-150
for c in "fp8 qwen3-30b-a3b" "w8a8-int8 gpt-oss-120b"; do set -- $c; for v in narrow wide; do
  e=QMOE_X=1; [ $v = narrow ] && e=QMOE_CUDA_WIDE_STORE=0
  env $e timeout 30 ncu --clock-control none -k 'regex:sm90_moe|reduce_' -c 3 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum $Q bench --backend cuda --shape $2 --m 4096 --scheme $1 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2_$v.txt 2>&1; echo "ncu $1 $2 $v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_$1_$2_$v.txt 2>&1 | grep -E "moe_|reduce|sum"
done; done
cd $OUT && tar czf r3.tgz r3
