#!/usr/bin/env bash
# session 9, call 1: full CUDA tests; the upload-race sequence (e2bbe92) with sync checks; A/B of
# base (HEAD eb759ad kernels) vs new (half tail + fp8 promotion overlap) vs new with
# QMOE_CUDA_HALF_TAIL=0; full benches; ncu of the prefill GEMMs; C ABI and Python tests.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/qmoe_base.xz $B/qmoe_base && chmod +x $B/qmoe_base
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log
Q="--backend cuda --shape all --m 256,1024,4096 --scheme mxfp4,nvfp4,w4a8-fp8,w8a8-int8"
for r in 1 2; do
  QMOE_CUDA_SYNC_CHECK=1 timeout 60 $B/qmoe bench $Q > /dev/null 2>$W/sq_$r.err; echo "sync Q $r rc $? $(el) $(grep -c bench: $W/sq_$r.err) rows; $(tail -n 1 $W/sq_$r.err | cut -c1-90)"
done
P="--backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8"
for r in 1 2; do
  timeout 60 $B/qmoe_base bench $P --json $W/ab_base_$r.json > /dev/null 2>$W/ab_base_$r.err; echo "base $r rc $? $(el)"
  timeout 60 $B/qmoe bench $P --json $W/ab_new_$r.json > /dev/null 2>$W/ab_new_$r.err; echo "new $r rc $? $(el)"
  QMOE_CUDA_HALF_TAIL=0 timeout 60 $B/qmoe bench $P --json $W/ab_notail_$r.json > /dev/null 2>$W/ab_notail_$r.err; echo "notail $r rc $? $(el)"
done
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "bench_all rc $? $(el)"
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
NCU="ncu --clock-control none -k regex:sm90_moe -c 2 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy"
for c in "qwen3-30b-a3b 4096 fp8" "qwen3-30b-a3b 4096 bf16" "qwen3-30b-a3b 1024 int4" "deepseek-v3 4096 fp8"; do
  set -- $c
  timeout 90 $NCU $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 > $W/ncu_$1_$2_$3.txt 2>&1; echo "ncu $c rc $? $(el)"
done
OUT=$W QMOE_GPU_PHASES="capi python" timeout 150 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r1.tgz r1
