#!/usr/bin/env bash
# session 17, call 3: where the W4A8 fp8 QGMMA kernel's time goes. ncu --set full (per-SASS stall
# samples) of GEMM1 of mixtral-8x7b w4a8-fp8 M = 4096 on the Q8 form, then the same launch on the
# 16-bit HGMMA form (QMOE_CUDA_W4A8_QGMMA=0) and the fp8 W8A8 QGMMA tile kernel for comparison.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
prof() {  # name, kernel regex, env, scheme
  env $3 timeout 120 ncu --clock-control none -k regex:$2 -c 1 --set full --import-source no -o $W/$1 $B/qmoe bench --backend cuda --shape mixtral-8x7b --m 4096 --scheme $4 --iters 1 --warmup 0 --settle-ms 0 > $W/$1_run.txt 2>&1; echo "$1 ncu rc $? $(el)"
  timeout 40 ncu --import $W/$1.ncu-rep --print-details all > $W/$1_details.txt 2>&1
  timeout 40 ncu --import $W/$1.ncu-rep --page source --csv --print-source sass > $W/$1_sass.csv 2>&1; echo "$1 export rc $? $(el)"
  rm -f $W/$1.ncu-rep; gzip $W/$1_details.txt $W/$1_sass.csv
}
prof q8 sm90_moe_wq QMOE_CUDA_W4A8_QGMMA=1 w4a8-fp8
prof hgmma sm90_moe_wq QMOE_CUDA_W4A8_QGMMA=0 w4a8-fp8
prof fp8 sm90_moe_gemm QMOE_CUDA_W4A8_QGMMA=1 fp8
cd $OUT && tar czf r3.tgz r3
