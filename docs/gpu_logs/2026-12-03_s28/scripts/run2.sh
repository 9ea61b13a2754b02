#!/usr/bin/env bash
# session 28, call 2: the streaming kernel's token tiles loaded L2-evict-last (QMOE_CUDA_STREAM_XHINT)
# and its weights evict-first (QMOE_CUDA_STREAM_HINT) against the rules, on the streaming rows
# (llama4-scout / mixtral-8x7b / deepseek-v3 / gpt-oss-120b, fp8 and bf16, M = 16 / 64 / 256), twice;
# ncu bytes of gpt-oss-120b fp8 M = 64 (stream) with the hint and M = 1024 (tile kernel); bf16 + fp8 anchor rows.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaSm90.TrimmedLastBox*:CudaSm90.StreamKernel*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -2 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r2.tgz r2; exit 1; fi
SH=llama4-scout,mixtral-8x7b,deepseek-v3,gpt-oss-120b
for rep in 1 2; do for cfg in base x w xw; do
  case $cfg in base) e="";; x) e="QMOE_CUDA_STREAM_XHINT=1";; w) e="QMOE_CUDA_STREAM_HINT=1";; xw) e="QMOE_CUDA_STREAM_XHINT=1 QMOE_CUDA_STREAM_HINT=1";; esac
  env $e timeout 45 $Q bench --backend cuda --shape $SH --m 16,64,256 --scheme fp8,bf16 --json $W/h_${cfg}_$rep.json > $W/h_${cfg}_$rep.md 2>$W/h_${cfg}_$rep.err; echo "$cfg rep $rep rc $? $(el)"
done; done
for cfg in x w xw; do
  python3 bench/compare_rows.py "$W/h_base_*.json" "$W/h_${cfg}_*.json" > $W/compare_$cfg.txt 2>&1; echo "== base vs $cfg"; grep -v '^|---' $W/compare_$cfg.txt | cut -c1-100
done
QMOE_CUDA_STREAM_XHINT=1 timeout 40 ncu --clock-control none -k 'regex:sm90_stream' -c 2 --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum $Q bench --backend cuda --shape gpt-oss-120b --m 64 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_gptoss64_xhint.txt 2>&1; echo "ncu xhint rc $? $(el)"
python3 bench/ncu_kernels.py $W/ncu_gptoss64_xhint.txt 2>&1 | tail -4
timeout 40 ncu --clock-control none -k 'regex:sm90_moe|sm90_gather' -c 4 --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum $Q bench --backend cuda --shape gpt-oss-120b --m 1024 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_gptoss1024.txt 2>&1; echo "ncu 1024 rc $? $(el)"
python3 bench/ncu_kernels.py $W/ncu_gptoss1024.txt 2>&1 | tail -6
timeout 70 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -8
cd $OUT && tar czf r2.tgz r2
