#!/usr/bin/env bash
# session 9, call 7: quantizing gathers with a branch-free correctly rounded division (RowDiv) and
# paired e4m3 conversions, padding rows not written: full tests (the bit-for-bit gather test among
# them), A/B against base3 (8f5ca29's sm90_moe_gemm.cu / moe_kernels.cu), per-kernel times, benches.
B=build-gpu-carry; W=$OUT/r7; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/qmoe_base3.xz $B/qmoe_base3 && chmod +x $B/qmoe_base3
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 30 $B/test_cuda --gtest_filter='CudaSm90.Gather*' > $W/test_gather.log 2>&1; echo "gather test rc $? $(el)"; grep -E "OK|FAILED|Failure" $W/test_gather.log | head -12
P="--backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8,w4a8-fp8,nvfp4"
for r in 1 2; do
  timeout 80 $B/qmoe_base3 bench $P --json $W/ab_base_$r.json > /dev/null 2>$W/ab_base_$r.err; echo "base $r rc $? $(el)"
  timeout 80 $B/qmoe bench $P --json $W/ab_new_$r.json > /dev/null 2>$W/ab_new_$r.err; echo "new $r rc $? $(el)"
done
for c in "qwen3-30b-a3b 4096 fp8" "deepseek-v3 4096 fp8"; do
  set -- $c
  timeout 60 ncu --clock-control none -k 'regex:align|sm90_moe|sm90_gather|reduce|act_|moe_|route|decode' -c 8 --metrics gpu__time_duration.sum,dram__bytes_read.sum $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 > $W/k_$1_$2_$3.txt 2>&1; echo "ncu $c rc $? $(el)"
done
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "bench_all rc $? $(el)"
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log
OUT=$W QMOE_GPU_PHASES="capi python" timeout 150 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r7.tgz r7
