# Shared by scripts/gpu_tests.sh and the per-session device scripts (docs/gpu_logs/*/scripts/run*.sh):
# source it, then
#   qmoe_cublas_path              puts the toolkit's cuBLAS, or the one PyTorch's wheels carry, on
#                                 LD_LIBRARY_PATH (the bench's ceilings need it)
#   gpu_run_begin BUILD NAME      for a device call: unpacks BUILD's pack (scripts/pack_gpu_build.sh), makes
#                                 W=$OUT/NAME, writes W/gpu.txt (card, clocks, power limit) and starts the
#                                 clock that `el` reads (seconds since); `pack` tars W into $OUT/NAME.tgz, so
#                                 what a call leaves comes back even when its time runs out
#   gpu_run_suite SECONDS         the GPU suite (scripts/gpu_tests.sh: info, tests, C ABI, Python) on B into
#                                 W/gpu_tests.log within SECONDS, its summary lines printed, then `pack`
qmoe_cublas_path() {
  local d
  for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
    if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
  done
}

gpu_run_begin() {
  B=$1
  GPU_RUN_NAME=$2
  W=$OUT/$2
  mkdir -p "$W"
  GPU_RUN_T0=$(date +%s)
  qmoe_cublas_path
  bash scripts/pack_gpu_build.sh --unpack "$B" > /dev/null
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$W/gpu.txt" 2>&1
  cat "$W/gpu.txt"
}
el() { echo $(( $(date +%s) - GPU_RUN_T0 )); }
pack() { (cd "$OUT" && tar czf "$GPU_RUN_NAME.tgz" "$GPU_RUN_NAME"); }
gpu_run_suite() {
  OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout "$1" bash scripts/gpu_tests.sh "$B" "$W/gpu_tests.log" > "$W/gpu_tests.stdout" 2>&1
  echo "suite rc $? $(el)"
  grep -E "FAILED|passed|failed|rc " "$W/gpu_tests.log" | tail -8
  pack
}
