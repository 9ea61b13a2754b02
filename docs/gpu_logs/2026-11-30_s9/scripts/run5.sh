#!/usr/bin/env bash
# session 9, call 5: N tiles per CTA (the stage ring continued across tiles): Hopper tests at 1 / 2 /
# 4 tiles, A/B of QMOE_CUDA_TILES_PER_CTA = 1 / 2 / 4, timelines; per-kernel times of llama4-scout
# M = 256 fp8 (base2 vs new: the one row r4 measured slower).
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
for v in trace3 base2; do python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/qmoe_$v.xz $B/qmoe_$v && chmod +x $B/qmoe_$v; done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
for n in 1 2 4; do
  QMOE_CUDA_TILES_PER_CTA=$n timeout 60 $B/test_cuda --gtest_filter='CudaSm90*' --gtest_brief=1 > $W/test_t$n.log 2>&1; echo "sm90 tests tiles $n rc $? $(el)"; tail -1 $W/test_t$n.log
done
P="--backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8"
for r in 1 2; do
  for n in 1 2 4; do
    QMOE_CUDA_TILES_PER_CTA=$n timeout 60 $B/qmoe bench $P --json $W/ab_t${n}_$r.json > /dev/null 2>$W/ab_t${n}_$r.err; echo "tiles $n run $r rc $? $(el)"
  done
done
for n in 2 4; do
  for c in "qwen3-30b-a3b 4096 fp8" "qwen3-30b-a3b 4096 bf16" "deepseek-v3 4096 fp8"; do
    set -- $c
    QMOE_CUDA_TILES_PER_CTA=$n QMOE_SM90_TRACE_FILE=$W/trace_t${n}_$1_$2_$3.txt timeout 30 $B/qmoe_trace3 bench --backend cuda --shape $1 --m $2 --scheme $3 > /dev/null 2>&1; echo "trace tiles $n $c rc $? $(el)"
  done
done
for v in base2 qmoe; do
  bin=$B/qmoe_$v; [ $v = qmoe ] && bin=$B/qmoe
  timeout 90 ncu --clock-control none -k 'regex:align_|sm90_|reduce_|act_|moe_|route_|gather|decode' -c 14 --metrics gpu__time_duration.sum $bin bench --backend cuda --shape llama4-scout --m 256 --scheme fp8 --iters 1 --warmup 0 > $W/ncu_llama4_256_fp8_$v.txt 2>&1; echo "ncu $v rc $? $(el)"
done
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r5.tgz r5
