#!/usr/bin/env bash
# session 26, call 4: knob sweep (no code change) on the fp8 rows furthest below vLLM on the
# memory-bound kernels: the kernel rules' alternatives through their environment switches.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
run() {  # name shape m env...
  local n=$1 sh=$2 m=$3; shift 3
  env "$@" QMOE_X=1 timeout 40 $Q bench --backend cuda --shape $sh --m $m --scheme fp8 --json $W/$n.json > $W/$n.md 2>$W/$n.err
  python3 -c "import json,sys; [print(f'$n {r[\"shape\"]} {r[\"m\"]} {r[\"us\"]:.1f} us {r[\"pct_floor\"]:.0f}% {r[\"kernel\"][26:]}') for r in json.load(open(sys.argv[1]))]" $W/$n.json
}
for rep in 1 2; do
  run q_def$rep qwen3-30b-a3b 16,64
  run q_str$rep qwen3-30b-a3b 16,64 QMOE_CUDA_STREAM=1
  run q_st4$rep qwen3-30b-a3b 16,64 QMOE_CUDA_DECODE90_STAGES=4
  run g_def$rep gpt-oss-120b 16,64
  run g_nt64$rep gpt-oss-120b 16,64 QMOE_CUDA_STREAM_NT=64
  run g_nos$rep gpt-oss-120b 16,64 QMOE_CUDA_STREAM=0
  run g_h0$rep gpt-oss-120b 16,64 QMOE_CUDA_STREAM_HINT=0
  run m_def$rep mixtral-8x7b 64,256
  run m_str$rep mixtral-8x7b 64,256 QMOE_CUDA_STREAM=1
  echo "rep $rep $(el)"
done
cd $OUT && tar czf r4.tgz r4
