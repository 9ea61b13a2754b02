#!/usr/bin/env python3
"""Golden fixtures from the real compressed-tensors library (issue 3 item 7).

For each case, seeded random weights (odd row counts, bf16 or fp16) get their quantization
parameters from compressed-tensors' own `calculate_qparams` / `generate_gparam`, are compressed by
the library's registered compressor for the format (pack-quantized, int-quantized,
float-quantized, nvfp4-pack-quantized, mxfp4-pack-quantized) and decompressed again by the same
library. The compressed tensors, the library's decompressed weight and the scheme (JSON, in the
file's __metadata__ under "scheme.<case>") are written to tests/golden/ct_golden.safetensors
(~350 KB). tests/formats/test_golden.cpp checks that qmoe's unpacking + codecs reproduce the
library's decompressed weights bit for bit.

actorder="group" (a weight_g_idx tensor mapping columns to groups) was removed from
compressed-tensors in 2026; with a version that still has it (0.16.0 was used) the script also
writes tests/golden/ct_golden_actorder.safetensors. The committed fixtures were made with
  pip install torch compressed-tensors safetensors      # 0.20.1: ct_golden.safetensors
  pip install --no-deps --target /tmp/ct016 compressed-tensors==0.16.0
  PYTHONPATH=/tmp/ct016 python scripts/make_golden.py    # adds ct_golden_actorder.safetensors

Needs: torch, compressed-tensors, safetensors (pip). Usage: scripts/make_golden.py [OUT_DIR]
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

import compressed_tensors
from compressed_tensors.compressors import BaseCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam


def rand_weight(gen, n, k, dtype):
    # Normal weights with a few large outliers per row, so scales differ across groups.
    w = torch.randn(n, k, generator=gen, dtype=torch.float32) * 0.05
    idx = torch.randint(0, k, (n, 2), generator=gen)
    w.scatter_(1, idx, torch.randn(n, 2, generator=gen) * 0.4)
    return w.to(dtype)


def reduce_minmax(w, args, g_idx=None):
    """Per-strategy min / max of w [N, K] (the observer's reduction)."""
    s = args.strategy
    n, k = w.shape
    if g_idx is not None:  # activation order: group g holds the columns with g_idx == g
        ng = k // args.group_size
        mins = torch.stack([w[:, g_idx == g].amin(dim=1) for g in range(ng)], dim=1)
        maxs = torch.stack([w[:, g_idx == g].amax(dim=1) for g in range(ng)], dim=1)
        return mins, maxs
    if s in ("group", "tensor_group"):
        g = w.reshape(n, k // args.group_size, args.group_size)
        return g.amin(dim=-1), g.amax(dim=-1)
    if s == "channel":
        return w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
    if s == "tensor":
        return w.amin().reshape(1), w.amax().reshape(1)
    if s == "block":
        bn, bk = args.block_structure
        nb, kb = -(-n // bn), -(-k // bk)
        p = torch.zeros(nb * bn, kb * bk, dtype=w.dtype)
        p[:n, :k] = w
        b = p.reshape(nb, bn, kb, bk).transpose(1, 2).reshape(nb, kb, bn * bk)
        # padding zeros take part, as in the library's block observer (zero is always included anyway)
        return b.amin(dim=-1), b.amax(dim=-1)
    raise ValueError(s)


CASES = {
    # name: (format, weights args, input activation args or None, N, K, dtype)
    "w4a16_sym_g128": ("pack-quantized", dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=128),
                       None, 37, 384, torch.bfloat16),
    "w4a16_asym_g64": ("pack-quantized", dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=64),
                       None, 37, 256, torch.bfloat16),
    "w4a16_sym_g32_actorder_weight": ("pack-quantized", dict(num_bits=4, type="int", symmetric=True, strategy="group",
                                                             group_size=32, actorder="weight"),
                                      None, 21, 160, torch.float16),
    "w8a16_channel": ("pack-quantized", dict(num_bits=8, type="int", symmetric=True, strategy="channel"),
                      None, 29, 200, torch.float16),
    "int8_w8a8": ("int-quantized", dict(num_bits=8, type="int", symmetric=True, strategy="channel"),
                  dict(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True), 33, 136, torch.bfloat16),
    "fp8_tensor": ("float-quantized", dict(num_bits=8, type="float", symmetric=True, strategy="tensor"),
                   dict(num_bits=8, type="float", symmetric=True, strategy="tensor", dynamic=False), 31, 144, torch.bfloat16),
    "fp8_channel": ("float-quantized", dict(num_bits=8, type="float", symmetric=True, strategy="channel"),
                    dict(num_bits=8, type="float", symmetric=True, strategy="token", dynamic=True), 35, 152, torch.bfloat16),
    "fp8_block": ("float-quantized", dict(num_bits=8, type="float", symmetric=True, strategy="block",
                                          block_structure=[128, 128]),
                  dict(num_bits=8, type="float", symmetric=True, strategy="group", group_size=128, dynamic=True),
                  200, 320, torch.bfloat16),
    "nvfp4": ("nvfp4-pack-quantized", dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group",
                                           group_size=16, scale_dtype="float8_e4m3fn"),
              dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16, dynamic="local",
                   scale_dtype="float8_e4m3fn"), 37, 96, torch.bfloat16),
    "mxfp4": ("mxfp4-pack-quantized", dict(num_bits=4, type="float", symmetric=True, strategy="group", group_size=32,
                                           scale_dtype="uint8"),
              None, 37, 96, torch.bfloat16),
}

# Only with a compressed-tensors version that still has actorder="group" (weight_g_idx).
CASES_ACTORDER = {
    "w4a16_asym_g64_actorder_group": ("pack-quantized", dict(num_bits=4, type="int", symmetric=False, strategy="group",
                                                             group_size=64, actorder="group"),
                                      None, 23, 320, torch.bfloat16),
    "w4a16_sym_g32_actorder_group": ("pack-quantized", dict(num_bits=4, type="int", symmetric=True, strategy="group",
                                                            group_size=32, actorder="group"),
                                     None, 19, 96, torch.float16),
}


def supports_actorder_group():
    try:
        args = QuantizationArgs(num_bits=4, type="int", strategy="group", group_size=32, actorder="group")
    except ValueError:  # pydantic: "actorder='group' has been removed"
        return False
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    comp = BaseCompressor.get_value_from_registry("pack-quantized")
    return "weight_g_idx" in comp.compression_param_names(scheme)


def dtype_arg(d):
    return getattr(torch, d) if isinstance(d, str) else d


def make_case(name, spec, gen):
    fmt, wargs, aargs, n, k, dtype = spec
    wa = dict(wargs)
    if "scale_dtype" in wa:
        wa["scale_dtype"] = dtype_arg(wa["scale_dtype"])
    args = QuantizationArgs(**wa)
    ia = None
    if aargs is not None:
        aa = dict(aargs)
        if "scale_dtype" in aa:
            aa["scale_dtype"] = dtype_arg(aa["scale_dtype"])
        ia = QuantizationArgs(**aa)
    scheme = QuantizationScheme(targets=["Linear"], weights=args, input_activations=ia, format=fmt)
    w = rand_weight(gen, n, k, dtype)
    g_idx = None
    if args.actorder == "group":
        # GPTQ order: columns ranked by a (random) activation order, group = rank // group_size.
        perm = torch.randperm(k, generator=gen)
        g_idx = torch.empty(k, dtype=torch.int32)
        g_idx[perm] = torch.arange(k, dtype=torch.int32) // args.group_size
    mn, mx = reduce_minmax(w, args, g_idx)
    sd = {"weight": w}
    if g_idx is not None:
        sd["weight_g_idx"] = g_idx
    gscale = None
    if args.strategy == "tensor_group":
        gscale = generate_gparam(w.amin(), w.amax())  # 448 * 6 / amax, fp32 [1]
        sd["weight_global_scale"] = gscale
    scale, zp = calculate_qparams(mn, mx, args, global_scale=gscale)
    sd["weight_scale"] = scale
    if not args.symmetric:
        sd["weight_zero_point"] = zp
    # Calibrated activation parameters travel through the compressor untouched; the loader needs
    # them (static per-tensor fp8: input_scale; NVFP4 W4A4: input_global_scale = 448 * 6 / amax).
    if ia is not None and ia.strategy == "tensor" and not ia.dynamic:
        sd["input_scale"] = torch.tensor([0.0173], dtype=dtype)
    if ia is not None and ia.strategy == "tensor_group":
        sd["input_global_scale"] = generate_gparam(torch.tensor(-3.7), torch.tensor(2.9))
    comp = BaseCompressor.get_value_from_registry(fmt)
    compressed = comp.compress(sd, scheme)
    decompressed = comp.decompress(compressed, scheme)["weight"]
    out = {f"{name}.{key}": t.contiguous() for key, t in compressed.items()}
    out[f"{name}.decompressed"] = decompressed.contiguous()
    meta = scheme.model_dump(mode="json", exclude_none=True)
    meta["weights"].pop("observer", None)
    meta["weights"].pop("observer_kwargs", None)
    if "input_activations" in meta:
        meta["input_activations"].pop("observer", None)
        meta["input_activations"].pop("observer_kwargs", None)
    meta["N"], meta["K"] = n, k
    return out, json.dumps(meta, sort_keys=True)


def write_fixture(path, cases, seed):
    gen = torch.Generator().manual_seed(seed)
    tensors, metadata = {}, {
        "generator": "scripts/make_golden.py",
        "compressed_tensors": compressed_tensors.__version__,
        "torch": torch.__version__,
    }
    for name, spec in cases.items():
        t, m = make_case(name, spec, gen)
        tensors.update(t)
        metadata[f"scheme.{name}"] = m
        print(f"{name}: " + ", ".join(f"{k.split('.', 1)[1]} {tuple(v.shape)} {v.dtype}" for k, v in t.items()))
    save_file(tensors, path, metadata=metadata)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "golden")
    os.makedirs(out_dir, exist_ok=True)
    print(f"compressed-tensors {compressed_tensors.__version__}, torch {torch.__version__}")
    if supports_actorder_group():
        write_fixture(os.path.join(out_dir, "ct_golden_actorder.safetensors"), CASES_ACTORDER, 7)
    else:
        print("this compressed-tensors has no actorder='group' (weight_g_idx): ct_golden_actorder.safetensors not written")
        write_fixture(os.path.join(out_dir, "ct_golden.safetensors"), CASES, 20240611)


if __name__ == "__main__":
    main()
