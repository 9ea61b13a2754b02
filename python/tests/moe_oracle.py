"""Float64 NumPy oracles for the qmoe Python tests: routing, moe_align_block_size, int4 / fp8
dequantization, and the MoE layer of docs/numerics.md with a per-element error bound.

The bound for y[t, h] covers what an fp32 implementation of the same formula may legitimately
differ by: one bf16 ulp of every intermediate h (the implementation's fp32 GEMM1 sum may round h
to the neighbouring bf16 value), fp32 accumulation (2^-20 of the sum of |terms|, generous for
K <= 4096), and one bf16 ulp of y for the final rounding. A layout or marshalling bug (transposed
weight, swapped gate/up, wrong expert, dropped scale) produces errors far above it.
"""
import numpy as np

try:
    import ml_dtypes
    BF16 = ml_dtypes.bfloat16
except ImportError:  # the tests that need it skip
    ml_dtypes = None
    BF16 = None


def round_bf16(a):
    return np.asarray(a, np.float32).astype(BF16).astype(np.float64)


def ulp_bf16(v):
    _, e = np.frexp(np.abs(np.asarray(v, np.float64)))
    return np.ldexp(1.0, e - 8)


def softmax_topk(logits, k, renormalize):
    z = logits.astype(np.float64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    ids = np.argsort(-z, axis=1, kind="stable")[:, :k]  # stable: ties to the lower index
    w = np.take_along_axis(p, ids, axis=1)
    if renormalize:
        w = w / w.sum(axis=1, keepdims=True)
    return w, ids.astype(np.int32)


def align(ids, num_experts, block, expert_map=None):
    """(sorted_token_ids used prefix, expert_ids used prefix, num_tokens_post_padded)."""
    flat = ids.reshape(-1)
    numel = flat.size
    sorted_ids, experts = [], []
    for e in range(num_experts):
        idx = [i for i in range(numel) if flat[i] == e]
        if not idx:
            continue
        pad = (-len(idx)) % block
        sorted_ids += idx + [numel] * pad
        experts += [e if expert_map is None else int(expert_map[e])] * ((len(idx) + pad) // block)
    return np.array(sorted_ids, np.int32), np.array(experts, np.int32), len(sorted_ids)


def pack_int4(u):
    """Codes u in [0, 16) [..., K] -> U8 [..., K/2], low nibble = even k (qmoe's canonical packing)."""
    u = u.astype(np.uint8)
    return (u[..., 0::2] | (u[..., 1::2] << 4)).astype(np.uint8)


def dequant_int4_sym(packed, scale, group):
    """U8 [E, N, K/2] sym codes (u - 8) and scales [E, N, K/G] -> float64 [E, N, K]."""
    u = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), np.int64)
    u[..., 0::2] = packed & 0xF
    u[..., 1::2] = packed >> 4
    s = np.repeat(np.asarray(scale).astype(np.float64), group, axis=-1)[..., : u.shape[-1]]
    return (u - 8) * s


def silu(g):
    return g / (1.0 + np.exp(-g))


def moe(x, w13, w2, topk_w, topk_ids, act_round=round_bf16):
    """y (float64, before the final rounding) and the per-element bound (module docstring).

    x [M, H], w13 [E, 2I, H], w2 [E, H, I] as float64 (dequantized); topk_w [M, k], topk_ids [M, k].
    """
    m, hidden = x.shape
    inter = w13.shape[1] // 2
    y = np.zeros((m, hidden))
    bound = np.zeros((m, hidden))
    for t in range(m):
        for j in range(topk_ids.shape[1]):
            e = int(topk_ids[t, j])
            wt = float(topk_w[t, j])
            g = w13[e, :inter] @ x[t]
            u = w13[e, inter:] @ x[t]
            h = act_round(silu(g) * u)
            y[t] += wt * (w2[e] @ h)
            a2 = np.abs(w2[e])
            bound[t] += wt * (a2 @ ulp_bf16(h) + (a2 @ np.abs(h)) * 2.0 ** -20)
    bound += ulp_bf16(y)
    return y, bound


def as_f64(a):
    return np.asarray(a).astype(np.float32).astype(np.float64)



def moe_bf16_weights_bound(x, w13, w2, topk_w, topk_ids):
    """(y, bound) for an implementation that either dequantizes weights exactly (the contract) or
    rounds each dequantized weight to bf16 before a bf16 MMA (allowed for int / fp4 weights by
    docs/numerics.md): the bound is the larger of the exact oracle's and, per element, the
    bf16-weight oracle's bound plus its distance to the exact result."""
    y, bound = moe(x, w13, w2, topk_w, topk_ids)
    yb, bound_b = moe(x, round_bf16(w13), round_bf16(w2), topk_w, topk_ids)
    return y, np.maximum(bound, bound_b + np.abs(yb - y))
