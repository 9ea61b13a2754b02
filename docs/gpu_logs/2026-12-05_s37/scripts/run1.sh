#!/usr/bin/env bash
# NOT RUN: no device machine came in two tries; its parts went into run2.sh.
# session 37, call 1 (HEAD 625d1be): (a) s36's call 4 (not run then): select_sm90's 64-row wq token
# tile up to 64 rows per expert with >= 64 experts against QMOE_CUDA_WQ_TN=128 at qwen3-30b-a3b
# M = 1024, every scheme on the wq kernel, three alternations; (b) 64-row M-blocks for the 16-bit /
# fp8 tile kernel at 128-256 rows per expert (QMOE_CUDA_WG64_MAX_ROWS=300) against the rule
# (128-row blocks there), two alternations; (c) the whole GPU suite at HEAD; (d) on an H200 only,
# the anchor rows (bf16 / fp8 / int4 at every M) if the time allows.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
S=int4,int4-g32,int8,w4a8-int8,w4a8-fp8,nvfp4,nvfp4a16,mxfp4
for rep in 1 2 3; do
  for v in 128 rule; do
    if [ $v = rule ]; then unset QMOE_CUDA_WQ_TN; else export QMOE_CUDA_WQ_TN=$v; fi
    timeout 60 $B/qmoe bench --backend cuda --shape qwen3-30b-a3b --m 1024 --scheme $S --json $W/t${v}_$rep.json > $W/t${v}_$rep.md 2>$W/t${v}_$rep.err
    echo "tn $v rep $rep rc $? $(el)"
  done
done
unset QMOE_CUDA_WQ_TN
python3 bench/compare_rows.py "$W/t128_*.json" "$W/trule_*.json" > $W/compare_tn.txt 2>&1; cat $W/compare_tn.txt
(cd $OUT && tar czf r1.tgz r1)
for rep in 1 2; do
  for v in rule 300; do
    if [ $v = rule ]; then unset QMOE_CUDA_WG64_MAX_ROWS; else export QMOE_CUDA_WG64_MAX_ROWS=$v; fi
    timeout 60 $B/qmoe bench --backend cuda --shape mixtral-8x7b,qwen3-30b-a3b,llama4-scout,deepseek-v3,gpt-oss-120b --m 1024,4096 --scheme bf16,fp8 --json $W/b${v}_$rep.json > $W/b${v}_$rep.md 2>$W/b${v}_$rep.err
    echo "bm64 $v rep $rep rc $? $(el)"
  done
done
unset QMOE_CUDA_WG64_MAX_ROWS
python3 bench/compare_rows.py "$W/brule_*.json" "$W/b300_*.json" > $W/compare_bm.txt 2>&1; cat $W/compare_bm.txt
(cd $OUT && tar czf r1.tgz r1)
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 260 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -12
(cd $OUT && tar czf r1.tgz r1)
if grep -q H200 $W/gpu.txt && [ $(el) -lt 330 ]; then
  timeout $(( 560 - $(el) )) $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
  python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -12
fi
cd $OUT && tar czf r1.tgz r1
