#!/usr/bin/env bash
# Runs `qmoe bench --backend cpu` on the anchors.md CPU shapes x schemes, one (shape, scheme) pair
# per process, each started only when the machine's 1-minute load average is below a threshold
# (the 2-core development machine is shared: other processes preempt the two OpenMP threads).
# JSON per pair lands in OUT_DIR; bench/merge_cpu_runs.py keeps, per row, the run with the
# lowest median time and writes the markdown table for docs/perf.md.
# Usage: bench/cpu_anchor_runs.sh BUILD_DIR OUT_DIR [max load, default 2.0] [max wait per pair s, default 300]
set -euo pipefail
build=${1:?build dir}; out=${2:?output dir}; max_load=${3:-2.0}; max_wait=${4:-300}
mkdir -p "$out"
for shape in qwen3-30b-a3b mixtral-8x7b llama4-scout; do
  for scheme in bf16 int4-g32 int8 mxfp4 nvfp4; do
    # start when the 1-minute load is below max_load and nothing else has been runnable for 5 s
    # (the 4th field of /proc/loadavg counts runnable tasks: this check and its shell are 1-2 of them)
    waited=0 quiet=0
    while [ "$waited" -lt "$max_wait" ]; do
      if awk -v m="$max_load" '{split($4, r, "/"); exit !($1 < m && r[1] <= 2)}' /proc/loadavg; then
        quiet=$((quiet + 1)); [ "$quiet" -ge 5 ] && break
      else
        quiet=0
      fi
      sleep 1; waited=$((waited + 1))
    done
    tag="$shape.$scheme.$(date +%H%M%S)"
    echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg): $shape $scheme" >&2
    nice -n -5 "$build/qmoe" bench --backend cpu --shape "$shape" --m 1,8,32,128,512 --scheme "$scheme" \
      --iters 5 --json "$out/$tag.json" > "$out/$tag.md" 2> "$out/$tag.err" || echo "failed: $shape $scheme" >&2
  done
done
