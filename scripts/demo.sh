#!/usr/bin/env bash
# The demo (make demo; $1 = build dir): generate tiny checkpoints in several architectures and
# formats, inspect them, verify every MoE layer against the exact reference and the bf16 original,
# show that a corrupted checkpoint is caught, run a forward, and bench briefly if `qmoe bench` exists.
set -euo pipefail
BUILD=${1:-build}
Q=$BUILD/qmoe
OUT=${DEMO_OUT:-demo_out}
rm -rf "$OUT"
mkdir -p "$OUT"
$Q --version
echo
echo "== formats qmoe gen writes"
$Q gen --list-formats

run() { echo; echo "\$ qmoe $*"; $Q "$@"; }

# arch:format pairs covering every adapter and the main families of layouts
PAIRS="mixtral:ct-w4a16 qwen3_moe:gptq deepseek_v3:deepseek-fp8 llama4:modelopt-nvfp4 gpt_oss:gpt-oss-mxfp4 qwen3_moe:ct-fp8-dynamic"
for p in $PAIRS; do
  arch=${p%%:*}; fmt=${p#*:}
  run gen --arch "$arch" --format "$fmt" --out "$OUT/$arch-$fmt" --seed 7
done

run inspect "$OUT/llama4-modelopt-nvfp4"
run inspect "$OUT/mixtral-ct-w4a16" --json | head -40

for p in $PAIRS; do
  arch=${p%%:*}; fmt=${p#*:}
  run verify "$OUT/$arch-$fmt" --reference "$OUT/$arch-$fmt/bf16" --backend cpu --tokens 8
done

# A checkpoint with gate and up swapped (what a wrong name map does): verify must flag it (exit 1).
echo
echo "== a corrupted checkpoint: layer 0 expert 0 gate_proj and up_proj swapped"
python3 - "$OUT/mixtral-ct-w4a16" "$OUT/mixtral-swapped" <<'PY'
import json, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst, ignore=shutil.ignore_patterns("bf16"))
path = dst + "/model.safetensors"
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
a, b = "model.layers.0.block_sparse_moe.experts.0.w1.", "model.layers.0.block_sparse_moe.experts.0.w3."
for k in [k for k in hdr if k.startswith(a)]:
    hdr[k], hdr[b + k[len(a):]] = hdr[b + k[len(a):]], hdr[k]
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(path, "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
PY
set +e
$Q verify "$OUT/mixtral-swapped" --reference "$OUT/mixtral-ct-w4a16/bf16" --backend cpu --tokens 8 | grep -E "FLAGGED|passed"
rc=${PIPESTATUS[0]}
set -e
echo "verify exit code: $rc (1 = flagged, as it should be)"
[ "$rc" = 1 ] || { echo "demo: the corrupted checkpoint was not flagged" >&2; exit 1; }

# A clean error for a bad TP size.
echo
echo "== TP size that does not divide: one clear line, exit 2"
set +e
$Q verify "$OUT/deepseek_v3-deepseek-fp8" --tp 2 2>&1 | head -1
set -e

# TP and EP at load: an actorder (g_idx) checkpoint split over 2 TP ranks (w2 keeps all its groups,
# as vLLM's load_full_w2), and EP rank 1 of 2 (only its experts are decoded).
run gen --arch qwen3_moe --format ct-w4a16-actorder --intermediate 256 --out "$OUT/qwen3_moe-actorder" --seed 7
run verify "$OUT/qwen3_moe-actorder" --reference "$OUT/qwen3_moe-actorder/bf16" --backend cpu --tokens 8 --tp 2 --tp-rank 1
run inspect "$OUT/qwen3_moe-actorder" --ep 2 --ep-rank 1 | head -6

has_cmd() { $Q --help | grep -qE "^  $1 "; }
run run "$OUT/qwen3_moe-gptq" --tokens 4 --backend cpu
run run "$OUT/llama4-modelopt-nvfp4" --tokens 4 --backend reference
if has_cmd bench; then
  run bench --backend cpu --shape 8,2,256,128 --m 1,8 --scheme int4,nvfp4 --iters 3 || echo "(bench failed; see above)"
else
  echo; echo "(qmoe bench is not in this build; skipped)"
fi
echo
echo "demo: done"
