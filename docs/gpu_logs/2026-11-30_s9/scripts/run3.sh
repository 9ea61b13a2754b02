#!/usr/bin/env bash
# session 9, call 3: the kept code (4ddfddc: half tail only) validated and A/B'd against
# QMOE_CUDA_HALF_TAIL=0; per-CTA timelines of the Hopper GEMMs (trace variant); the Hopper path
# from fewer rows per expert (QMOE_CUDA_WGMMA_MIN_ROWS) at M = 16-256.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/qmoe_trace.xz $B/qmoe_trace && chmod +x $B/qmoe_trace
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 100 $B/test_cuda --gtest_filter='CudaSm90*:CudaMoe*:CudaQ*' --gtest_brief=1 > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -3 $W/test.log
for c in "qwen3-30b-a3b 4096 fp8" "qwen3-30b-a3b 4096 bf16" "deepseek-v3 4096 fp8" "deepseek-v3 4096 bf16" "mixtral-8x7b 4096 bf16" "mixtral-8x7b 256 bf16" "qwen3-30b-a3b 1024 fp8" "gpt-oss-120b 4096 fp8"; do
  set -- $c
  QMOE_SM90_TRACE_FILE=$W/trace_$1_$2_$3.txt timeout 30 $B/qmoe_trace bench --backend cuda --shape $1 --m $2 --scheme $3 > /dev/null 2>$W/trace_$1_$2_$3.err; echo "trace $c rc $? $(el)"
done
P="--backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8"
for r in 1 2; do
  QMOE_CUDA_HALF_TAIL=0 timeout 60 $B/qmoe bench $P --json $W/ab_notail_$r.json > /dev/null 2>$W/ab_notail_$r.err; echo "notail $r rc $? $(el)"
  timeout 60 $B/qmoe bench $P --json $W/ab_tail_$r.json > /dev/null 2>$W/ab_tail_$r.err; echo "tail $r rc $? $(el)"
done
D="--backend cuda --shape all --m 16,64,256 --scheme bf16,fp8"
for r in 1 2; do
  timeout 60 $B/qmoe bench $D --json $W/mr_def_$r.json > /dev/null 2>$W/mr_def_$r.err; echo "minrows default $r rc $? $(el)"
  QMOE_CUDA_WGMMA_MIN_ROWS=1 timeout 60 $B/qmoe bench $D --json $W/mr_1_$r.json > /dev/null 2>$W/mr_1_$r.err; echo "minrows 1 $r rc $? $(el)"
  QMOE_CUDA_WGMMA_MIN_ROWS=5 timeout 60 $B/qmoe bench $D --json $W/mr_5_$r.json > /dev/null 2>$W/mr_5_$r.err; echo "minrows 5 $r rc $? $(el)"
done
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r3.tgz r3
