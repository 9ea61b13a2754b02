#!/usr/bin/env bash
# session 45, call 1 (HEAD at 1031259; pack 97060ae;'s GPU code is 3755346's: int4 256-row wq tiles from 128 rows per expert, which
# has run on an H100 only): (a) the whole GPU suite (test_cuda, C ABI, Python); (b) the anchor pass
# bf16/fp8/int4 x 5 shapes x 6 M; (c) issue 5's rows (fp4, W4A8, W8A8-int8) at M = 1, 16, 4096.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
bash scripts/pack_gpu_build.sh --unpack $B > /dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 330 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -8
(cd $OUT && tar czf r1.tgz r1)
timeout 110 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchors rc $? $(el)"
(cd $OUT && tar czf r1.tgz r1)
timeout $(( 585 - $(el) )) $B/qmoe bench --backend cuda --shape all --m 1,16,4096 --scheme mxfp4,nvfp4a16,nvfp4,w4a8-fp8,w4a8-int8,w8a8-int8 --json $W/i5.json > $W/i5.md 2>$W/i5.err; echo "i5 rc $? $(el)"
cd $OUT && tar czf r1.tgz r1
