#!/usr/bin/env bash
# session 28, call 3: trimmed last boxes, evict-last token tiles by rule, and fp8 GEMM2 on the bulk
# decode kernel quantizing h as it stages it with GEMM1's per-row maxima (QMOE_CUDA_H_QUANT_IN_GEMM2).
# First tests, the whole CUDA suite; A/B QMOE_CUDA_H_QUANT_IN_GEMM2 0 / 1 on fp8 M = 1 / 16 / 64 (every
# shape), twice; A/B QMOE_CUDA_STREAM=1 against the rules on tile-kernel rows near the
# streaming rule (qwen3-30b-a3b M = 256 / 1024, gpt-oss-120b / deepseek-v3 M = 1024, llama4-scout /
# mixtral-8x7b M = 256), twice; ncu bytes of qwen3-30b-a3b fp8 M = 256; C ABI / Python; anchor rows.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
# the new h quantization first: if it fails, everything after runs without it (QMOE_CUDA_H_QUANT_IN_GEMM2=0)
timeout 60 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaDecode.HQuantInGemm2*' > $W/test_hq.log 2>&1; hq_rc=$?; echo "h-quant test rc $hq_rc $(el)"; tail -2 $W/test_hq.log; grep -B2 -A8 "Failure" $W/test_hq.log | head -30
if [ $hq_rc != 0 ]; then export QMOE_CUDA_H_QUANT_IN_GEMM2=0; echo "h quantization in GEMM2 OFF for the rest"; fi
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaSm90.TrimmedLastBox*:CudaSm90.StreamKernel*:CudaDecode*:DecodeFormats/*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -2 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ] && [ $hq_rc = 0 ]; then cd $OUT && tar czf r3.tgz r3; exit 1; fi
timeout 240 $B/test_cuda --gtest_brief=1 --gtest_filter='-CudaSm90.TrimmedLastBox*:CudaSm90.StreamKernel*:Select*:CudaDecode*:DecodeFormats/*' > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
[ $hq_rc = 0 ] && for rep in 1 2; do for v in 0 1; do
  QMOE_CUDA_H_QUANT_IN_GEMM2=$v timeout 40 $Q bench --backend cuda --shape all --m 1,16,64 --scheme fp8 --json $W/hq${v}_$rep.json > $W/hq${v}_$rep.md 2>$W/hq${v}_$rep.err; echo "hq$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/hq0_*.json" "$W/hq1_*.json" > $W/compare_hq.txt 2>&1; grep -v '^|---' $W/compare_hq.txt | cut -c1-110
for rep in 1 2; do for v in d 1; do
  e=""; [ $v = 1 ] && e="QMOE_CUDA_STREAM=1"
  env $e timeout 30 $Q bench --backend cuda --shape qwen3-30b-a3b --m 256,1024 --scheme fp8,bf16 --json $W/sq_${v}_$rep.json > $W/sq_${v}_$rep.md 2>$W/sq_${v}_$rep.err; echo "sq $v rep $rep rc $? $(el)"
  env $e timeout 30 $Q bench --backend cuda --shape gpt-oss-120b,deepseek-v3 --m 1024 --scheme fp8 --json $W/so_${v}_$rep.json > $W/so_${v}_$rep.md 2>$W/so_${v}_$rep.err; echo "so $v rep $rep rc $? $(el)"
  env $e timeout 30 $Q bench --backend cuda --shape llama4-scout,mixtral-8x7b --m 256 --scheme fp8,bf16 --json $W/sl_${v}_$rep.json > $W/sl_${v}_$rep.md 2>$W/sl_${v}_$rep.err; echo "sl $v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/s?_d_*.json" "$W/s?_1_*.json" > $W/compare_stream.txt 2>&1; grep -v '^|---' $W/compare_stream.txt | cut -c1-110
timeout 40 ncu --clock-control none -k 'regex:align_|sm90_moe|sm90_gather|reduce_|act_' -c 6 --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum $Q bench --backend cuda --shape qwen3-30b-a3b --m 256 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_qwen3_256.txt 2>&1; echo "ncu rc $? $(el)"
python3 bench/ncu_kernels.py $W/ncu_qwen3_256.txt 2>&1 | tail -8
OUT=$W QMOE_GPU_PHASES="capi python" timeout 45 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
timeout 70 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -8
cd $OUT && tar czf r3.tgz r3
