"""qmoe from Python: quantized Mixture-of-Experts layers from published checkpoints, on CPU and CUDA.

Arrays go in and come out through DLPack: torch tensors (CPU or CUDA), NumPy arrays (with
ml_dtypes for bfloat16 / float8), CuPy arrays, or any object with ``__dlpack__``. Results are
allocated in the framework of the first input, on its device. CUDA work runs on the caller's
current stream (``torch.cuda.current_stream()`` / ``cupy.cuda.get_current_stream()``) unless a
``stream=`` is given. This package only marshals: every computation is qmoe's C++ through its C
ABI (include/qmoe/c_api.h).

    ck = qmoe.load("ckpt_dir")                       # Checkpoint: ck.info, ck.schemes, ck.layers
    y = ck.layers[0].forward(x, router_logits)       # prepared for "cpu" or "cuda" on first use
    w, ids = qmoe.route(router_logits, top_k=2, renormalize=True)
    y = qmoe.fused_experts(x, w13, w2, w, ids)       # vLLM's fused_experts, canonical weights
"""
import json
import os

from ._errors import BadInputError, Error, InternalError, UnsupportedError, VerifyFailedError, from_status


def _load_extension():
    try:
        from . import _qmoe
    except ImportError:
        # A development build: the extension lives in <build>/python/qmoe (scripts/python_tests.sh).
        build = os.environ.get("QMOE_BUILD_DIR")
        if not build:
            raise
        where = os.path.join(os.path.abspath(build), "python", "qmoe")
        if where not in __path__:
            __path__.append(where)
        from . import _qmoe
    return _qmoe


_ext = _load_extension()

__version__ = _ext.version()
C_API_VERSION = _ext.api_version()

__all__ = [
    "load", "Checkpoint", "CheckpointLayer", "Layer", "layer_from_tensors", "fused_experts", "route",
    "align_block_size", "typed", "Error", "BadInputError", "UnsupportedError", "VerifyFailedError",
    "InternalError", "DTYPES", "BACKENDS",
]

# qmoe_dtype_t codes by safetensors name, and the names framework dtypes carry.
DTYPES = ["F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "I8", "U8", "I16", "U16", "I32",
          "U32", "I64", "U64", "BOOL"]
_CODE = {n: i for i, n in enumerate(DTYPES)}
_F32, _BF16, _I32, _U8 = _CODE["F32"], _CODE["BF16"], _CODE["I32"], _CODE["U8"]
_BY_FRAMEWORK_NAME = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0", "int8": "I8", "uint8": "U8", "int16": "I16",
    "uint16": "U16", "int32": "I32", "uint32": "U32", "int64": "I64", "uint64": "U64", "bool": "BOOL",
}
# Types DLPack / NumPy cannot carry portably travel as same-width integers (bit patterns unchanged).
_EXOTIC = {"BF16": 16, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8}

BACKENDS = ["reference", "cpu", "cuda"]
_ROUTERS = ["softmax_topk", "sigmoid_topk", "topk_softmax", "llama4", "grouped"]
_ACTIVATIONS = {"silu": 0, "gelu": 1, "swigluoai": 2}
_SCHEMES = ["unquantized", "wna16", "fp8_w8a8", "fp8_a16", "int8_w8a8", "w4a8_fp8", "w4a8_int8", "nvfp4",
            "nvfp4_a16", "mxfp4_a16"]
_ACT_QUANTS = ["none", "fp8_tensor", "fp8_token", "fp8_group128", "int8_token", "nvfp4"]


class typed:
    """An array plus the qmoe dtype its bytes hold, for frameworks without that dtype:
    ``qmoe.typed(np_uint8_array, "F8_E4M3")``. The element width must match."""

    def __init__(self, array, dtype):
        if dtype not in _CODE:
            raise BadInputError(f"typed(): unknown qmoe dtype {dtype!r}; expected one of {DTYPES}")
        self.array, self.dtype = array, dtype


# ---- framework adapters ---------------------------------------------------------------------

def _framework(x):
    mod = type(x).__module__
    for name in ("torch", "numpy", "cupy"):
        if mod == name or mod.startswith(name + "."):
            return name
    return "other"


def _is_cuda(x):
    fw = _framework(x)
    if fw == "torch":
        return x.is_cuda
    return fw == "cupy"


def _dtype_name(x):
    name = str(x.dtype)
    return name[len("torch."):] if name.startswith("torch.") else name


def _import_other(x, what):
    """Anything else: DLPack objects through NumPy (CPU) or torch / CuPy (CUDA); sequences via NumPy."""
    import numpy as np
    if hasattr(x, "__dlpack_device__"):
        dev = x.__dlpack_device__()[0]
        if dev == 1:
            return np.from_dlpack(x)
        try:
            import torch
            return torch.from_dlpack(x)
        except ImportError:
            import cupy
            return cupy.from_dlpack(x)
    try:
        return np.asarray(x)
    except Exception as e:  # noqa: BLE001 - re-raised as qmoe's error
        raise BadInputError(f"{what}: cannot read {type(x).__name__} as an array ({e})") from e


def _norm(x, what, dtype=None):
    """(array to hand to the extension, qmoe dtype code), contiguous, exotic dtypes as integers."""
    if isinstance(x, typed):
        dtype, x = x.dtype, x.array
    if _framework(x) == "other":
        x = _import_other(x, what)
    fw = _framework(x)
    if dtype is None:
        dtype = _BY_FRAMEWORK_NAME.get(_dtype_name(x))
        if dtype is None:
            raise BadInputError(f"{what}: dtype {x.dtype} has no qmoe equivalent")
    if fw == "torch":
        x = x.detach()
        if not x.is_contiguous():
            x = x.contiguous()
        if dtype in _EXOTIC and _dtype_name(x) not in ("uint8", "int16", "uint16"):
            import torch
            x = x.view(torch.int16 if _EXOTIC[dtype] == 16 else torch.uint8)
    elif fw == "numpy":
        import numpy as np
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        if dtype in _EXOTIC and x.dtype.kind not in "ui":
            x = x.view(np.uint16 if _EXOTIC[dtype] == 16 else np.uint8)
    elif fw == "cupy":
        import cupy
        if not x.flags.c_contiguous:
            x = cupy.ascontiguousarray(x)
    return (x, _CODE[dtype])


def _norm_out(y, what):
    """Like _norm for an output: must already be contiguous (a copy would not be written back)."""
    fw = _framework(y)
    contiguous = y.is_contiguous() if fw == "torch" else bool(y.flags.c_contiguous)
    if not contiguous:
        raise BadInputError(f"{what}: output arrays must be contiguous")
    return _norm(y, what)


def _opt(x, what, dtype=None):
    return None if x is None else _norm(x, what, dtype)


def _empty(like, shape, code):
    """An uninitialized array of qmoe dtype `code` in the framework and on the device of `like`."""
    fw = _framework(like)
    name = DTYPES[code]
    if fw == "torch":
        import torch
        tdt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32,
               "U8": torch.uint8}[name]
        return torch.empty(shape, dtype=tdt, device=like.device)
    if fw == "cupy":
        import cupy
        if name == "BF16":
            raise BadInputError("CuPy has no bfloat16 dtype: pass a preallocated `out=` (e.g. a torch tensor)")
        with like.device:
            return cupy.empty(shape, dtype={"F32": "float32", "F16": "float16", "I32": "int32"}[name])
    import numpy as np
    if name == "BF16":
        try:
            import ml_dtypes
        except ImportError as e:
            raise BadInputError("bfloat16 results on NumPy need ml_dtypes (pip install ml_dtypes)") from e
        return np.empty(shape, dtype=ml_dtypes.bfloat16)
    return np.empty(shape, dtype={"F32": np.float32, "F16": np.float16, "I32": np.int32}[name])


def _adopt(x):
    """`x` when it is a torch / NumPy / CuPy array, else that framework's view of it (outputs follow it)."""
    return x if _framework(x) in ("torch", "numpy", "cupy") else _import_other(x, "input")


def _stream(like, stream):
    """The cudaStream_t (as an int) to run on: `stream` when given, else the framework's current one."""
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream / cupy.cuda.Stream
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    if not _is_cuda(like):
        return 0
    if _framework(like) == "torch":
        import torch
        return int(torch.cuda.current_stream(like.device).cuda_stream)
    import cupy
    return int(cupy.cuda.get_current_stream().ptr)


def _device_of(x):
    """A context making x's CUDA device current (layers are prepared on the current device)."""
    import contextlib
    if x is not None and _is_cuda(x):
        if _framework(x) == "torch":
            import torch
            return torch.cuda.device(x.device)
        return x.device  # cupy.cuda.Device is a context manager
    return contextlib.nullcontext()


def _to_f32(x):
    """Router logits as float32 (the layer's contract); bf16 / f16 logits are converted."""
    fw = _framework(x)
    if fw == "torch":
        import torch
        return x if x.dtype == torch.float32 else x.float()
    if fw in ("numpy", "cupy") and str(x.dtype) != "float32":
        return x.astype("float32")
    return x


# ---- routing --------------------------------------------------------------------------------

def _router(kind, top_k, renormalize, scoring="sigmoid", num_groups=1, topk_group=1,
            routed_scaling_factor=1.0, apply_router_weight_on_input=False):
    if kind not in _ROUTERS:
        raise BadInputError(f"router kind {kind!r} is not one of {_ROUTERS}")
    if scoring not in ("sigmoid", "softmax"):
        raise BadInputError(f"scoring {scoring!r} is neither 'sigmoid' nor 'softmax'")
    return dict(kind=_ROUTERS.index(kind), top_k=int(top_k), renormalize=bool(renormalize),
                grouped_sigmoid=scoring == "sigmoid", num_groups=int(num_groups), topk_group=int(topk_group),
                routed_scaling_factor=float(routed_scaling_factor),
                apply_router_weight_on_input=bool(apply_router_weight_on_input))


def route(router_logits, top_k, *, kind="softmax_topk", renormalize=False, bias=None, scoring="sigmoid",
          num_groups=1, topk_group=1, routed_scaling_factor=1.0, stream=None):
    """Router logits [M, E] (F32 / BF16 / F16) -> (topk_weights F32 [M, k], topk_ids I32 [M, k]).

    kind: "softmax_topk" (Mixtral, Qwen3), "sigmoid_topk", "topk_softmax" (gpt-oss), "llama4", or
    "grouped" (DeepSeek-V3 noaux_tc, with bias / scoring / num_groups / topk_group /
    routed_scaling_factor). Ties go to the lowest expert index.
    """
    router_logits = _adopt(router_logits)
    lt = _norm(router_logits, "router_logits")
    m = router_logits.shape[0]
    w = _empty(router_logits, (m, int(top_k)), _F32)
    ids = _empty(router_logits, (m, int(top_k)), _I32)
    _ext.route(lt, _router(kind, top_k, renormalize, scoring, num_groups, topk_group, routed_scaling_factor),
               _opt(bias, "bias"), _norm_out(w, "topk_weights"), _norm_out(ids, "topk_ids"),
               _stream(router_logits, stream))
    return w, ids


def align_block_size(topk_ids, block_size, num_experts, expert_map=None, *, stream=None):
    """vLLM's moe_align_block_size: topk_ids I32 [M, k] -> (sorted_token_ids I32 [capacity],
    expert_ids I32 [capacity / block_size], num_tokens_post_padded I32 [1]).

    Padding entries of sorted_token_ids hold M * k; expert_ids past the used blocks, and blocks of
    experts that expert_map (I32 [num_experts], global -> local or -1) sends elsewhere, hold -1.
    """
    topk_ids = _adopt(topk_ids)
    it = _norm(topk_ids, "topk_ids")
    numel = 1
    for s in topk_ids.shape:
        numel *= int(s)
    cap, blocks = _ext.align_sizes(numel, int(num_experts), int(block_size))
    sorted_ids = _empty(topk_ids, (cap,), _I32)
    expert_ids = _empty(topk_ids, (blocks,), _I32)
    ntp = _empty(topk_ids, (1,), _I32)
    _ext.align_block_size(it, int(num_experts), int(block_size), _opt(expert_map, "expert_map"),
                          _norm_out(sorted_ids, "sorted_token_ids"), _norm_out(expert_ids, "expert_ids"),
                          _norm_out(ntp, "num_tokens_post_padded"), _stream(topk_ids, stream))
    return sorted_ids, expert_ids, ntp


# ---- layers ---------------------------------------------------------------------------------

class Layer:
    """A prepared MoE layer for one backend ("reference", "cpu" or "cuda")."""

    def __init__(self, handle, keep=()):
        self._h = handle
        self._keep = keep  # borrowed weight arrays (layer_from_tensors(copy=False))
        p = handle.props()
        self.backend = BACKENDS[p["backend"]]
        self.num_experts = p["num_experts"]
        self.num_experts_global = p["num_experts_global"]
        self.hidden = p["hidden"]
        self.intermediate = p["intermediate"]
        self.top_k = p["top_k"]
        self.act_dtype = DTYPES[p["act_dtype"]]
        self.scheme = p["scheme_key"]
        self.method = p["method"]

    def __repr__(self):
        return (f"qmoe.Layer(backend={self.backend!r}, scheme={self.scheme!r}, method={self.method!r}, "
                f"E={self.num_experts}, H={self.hidden}, I={self.intermediate}, top_k={self.top_k})")

    def _out(self, x, out):
        if out is not None:
            return out
        return _empty(x, (x.shape[0], self.hidden), _CODE[self.act_dtype])

    def forward(self, x, router_logits, *, out=None, stream=None):
        """x [M, H] (the layer's act dtype), router_logits [M, E] -> y [M, H] (written to `out` if given)."""
        x = _adopt(x)
        y = self._out(x, out)
        self._h.forward(_norm(x, "x"), _norm(_to_f32(router_logits), "router_logits"), _norm_out(y, "out"),
                        _stream(x, stream))
        return y

    __call__ = forward

    def forward_routed(self, x, topk_weights, topk_ids, *, out=None, stream=None):
        """The same with routing given: topk_weights F32 [M, k], topk_ids I32 [M, k] (global expert ids)."""
        x = _adopt(x)
        y = self._out(x, out)
        self._h.forward_routed(_norm(x, "x"), _norm(topk_weights, "topk_weights"), _norm(topk_ids, "topk_ids"),
                               _norm_out(y, "out"), _stream(x, stream))
        return y

    def close(self):
        """Frees the prepared weights now (they are also freed when the object is collected)."""
        self._h.close()
        self._keep = ()


def _proj(weight, scale=None, zero_point=None, g_idx=None, global_scale=None, input_scale=None, bias=None,
          where="w13"):
    d = {"weight": _norm(weight, where)}
    for key, val in (("scale", scale), ("zero_point", zero_point), ("g_idx", g_idx),
                     ("global_scale", global_scale), ("input_scale", input_scale), ("bias", bias)):
        if val is not None:
            d[key] = _norm(val, f"{where}_{key}")
    return d


def _scheme_from_flags(scheme, use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, use_mxfp4_w4a16,
                       use_nvfp4_w4a4):
    if scheme is not None:
        if scheme in ("bf16", "fp16", "f32", "none"):
            scheme = "unquantized"
        if scheme not in _SCHEMES:
            raise BadInputError(f"scheme {scheme!r} is not one of {_SCHEMES}")
        return scheme
    flags = [(use_fp8_w8a8, "fp8_w8a8"), (use_int8_w8a8, "int8_w8a8"), (use_int8_w8a16, "wna16"),
             (use_int4_w4a16, "wna16"), (use_mxfp4_w4a16, "mxfp4_a16"), (use_nvfp4_w4a4, "nvfp4")]
    chosen = [name for on, name in flags if on]
    if len(chosen) > 1:
        raise BadInputError(f"more than one use_* scheme flag is set: {chosen}")
    return chosen[0] if chosen else "unquantized"


def _per_tensor(scale, num_experts, shards, what):
    """vLLM's per-tensor scales ([] / [1] / [E]) broadcast to qmoe's canonical [E, shards]."""
    if scale is None:
        return None
    shape = tuple(int(s) for s in scale.shape)
    if shape == (num_experts, shards):
        return scale
    if shape not in ((), (1,), (num_experts,)):
        raise BadInputError(f"{what}: per-tensor scale of shape {list(shape)}; expected [], [1], [{num_experts}] "
                            f"or [{num_experts}, {shards}]")
    fw = _framework(scale)
    col = scale.reshape(-1, 1) if shape == (num_experts,) else scale.reshape(1, 1)
    if fw == "torch":
        return col.expand(num_experts, shards).contiguous()
    import numpy as np
    if fw == "cupy":
        import cupy
        return cupy.ascontiguousarray(cupy.broadcast_to(col, (num_experts, shards)))
    return np.ascontiguousarray(np.broadcast_to(np.asarray(col), (num_experts, shards)))


def _experts_desc(hidden_states_dtype, hidden, w1, w2, *, scheme, use_fp8_w8a8=False, use_int8_w8a8=False,
                  use_int8_w8a16=False, use_int4_w4a16=False, use_mxfp4_w4a16=False, use_nvfp4_w4a4=False,
                  per_channel_quant=False, w1_scale=None, w2_scale=None, w1_zp=None, w2_zp=None, a1_scale=None,
                  a2_scale=None, block_shape=None, w1_bias=None, w2_bias=None, group_size=None, w1_g_idx=None,
                  w2_g_idx=None, w1_global_scale=None, w2_global_scale=None, act_quant=None):
    kind = _scheme_from_flags(scheme, use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16, use_int4_w4a16,
                              use_mxfp4_w4a16, use_nvfp4_w4a4)
    if len(w1.shape) != 3 or len(w2.shape) != 3:
        raise BadInputError(f"w1 / w2 must be [E, 2I, H] / [E, H, I]; got {list(w1.shape)} / {list(w2.shape)}")
    num_experts, two_i = int(w1.shape[0]), int(w1.shape[1])
    d = dict(scheme=_SCHEMES.index(kind), num_experts=num_experts, hidden=int(hidden), intermediate=two_i // 2,
             act_dtype=_CODE[hidden_states_dtype])
    if kind == "wna16":
        d["weight_bits"] = 8 if use_int8_w8a16 else 4 if use_int4_w4a16 else 0
    if act_quant is not None:
        if act_quant not in _ACT_QUANTS:
            raise BadInputError(f"act_quant {act_quant!r} is not one of {_ACT_QUANTS}")
        d["act_quant"] = _ACT_QUANTS.index(act_quant)
    if block_shape is not None:
        d["block_n"], d["block_k"] = int(block_shape[0]), int(block_shape[1])
    elif per_channel_quant:
        d["weight_strategy"] = 1
    if group_size is not None:
        d["group_size"] = int(group_size)
    elif kind in ("wna16", "w4a8_fp8", "w4a8_int8") and w1_scale is not None and len(w1_scale.shape) == 3 \
            and int(w1_scale.shape[2]) > 1:
        d["group_size"] = int(hidden) // int(w1_scale.shape[2])  # [E, 2I, H / G]
    if kind in ("fp8_w8a8", "fp8_a16") and block_shape is None and not per_channel_quant and w1_scale is not None \
            and len(w1_scale.shape) <= 1:
        w1_scale = _per_tensor(w1_scale, num_experts, 2, "w1_scale")
        w2_scale = _per_tensor(w2_scale, num_experts, 1, "w2_scale")
    a1_scale = _per_tensor(a1_scale, num_experts, 2, "a1_scale")
    a2_scale = _per_tensor(a2_scale, num_experts, 1, "a2_scale")
    d["w13"] = _proj(w1, w1_scale, w1_zp, w1_g_idx, w1_global_scale, a1_scale, w1_bias, "w1")
    d["w2"] = _proj(w2, w2_scale, w2_zp, w2_g_idx, w2_global_scale, a2_scale, w2_bias, "w2")
    return d


def _backend_for(x, backend):
    if backend is None:
        return "cuda" if _is_cuda(x) else "cpu"
    if backend not in BACKENDS:
        raise BadInputError(f"backend {backend!r} is not one of {BACKENDS}")
    return backend


def _layer_desc(x_dtype, hidden, w1, w2, top_k, router, activation, global_num_experts, expert_map, backend,
                **quant):
    if activation not in _ACTIVATIONS:
        raise BadInputError(f"activation {activation!r} is not one of {sorted(_ACTIVATIONS)}")
    d = _experts_desc(x_dtype, hidden, w1, w2, **quant)
    d["router"] = router
    d["activation"] = _ACTIVATIONS[activation]
    d["num_experts_global"] = int(global_num_experts) if global_num_experts and global_num_experts > 0 else 0
    if expert_map is not None:
        import numpy as np
        em = expert_map.cpu().numpy() if _framework(expert_map) == "torch" else np.asarray(
            expert_map.get() if _framework(expert_map) == "cupy" else expert_map)
        d["expert_map"] = [int(v) for v in em.reshape(-1)]
    d["backend"] = BACKENDS.index(backend)
    return d


def fused_experts(hidden_states, w1, w2, topk_weights, topk_ids, *, inplace=False, activation="silu",
                  apply_router_weight_on_input=False, use_fp8_w8a8=False, use_int8_w8a8=False,
                  use_int8_w8a16=False, use_int4_w4a16=False, use_mxfp4_w4a16=False, use_nvfp4_w4a4=False,
                  per_channel_quant=False, global_num_experts=-1, expert_map=None, w1_scale=None, w2_scale=None,
                  w1_zp=None, w2_zp=None, a1_scale=None, a2_scale=None, block_shape=None, w1_bias=None,
                  w2_bias=None, scheme=None, act_quant=None, group_size=None, w1_g_idx=None, w2_g_idx=None,
                  w1_global_scale=None, w2_global_scale=None, backend=None, out=None, stream=None):
    """vLLM's ``fused_experts`` on qmoe: hidden_states [M, H], w1 = w13 [E, 2I, H(/2)] (gate rows then
    up rows), w2 [E, H, I(/2)], topk_weights F32 [M, k], topk_ids I32 [M, k] -> [M, H].

    Weights, scales and zero points are in qmoe's canonical encoding (include/qmoe/moe.h; int
    weights as unsigned codes u = q + 2^(b-1) when symmetric, 4-bit packed two per byte along K).
    The scheme comes from ``scheme=`` (one of "unquantized", "wna16", "fp8_w8a8", "fp8_a16",
    "int8_w8a8", "w4a8_fp8", "w4a8_int8", "nvfp4", "nvfp4_a16", "mxfp4_a16") or from vLLM's use_*
    flags. Per-tensor fp8 scales and a1/a2 scales may be given vLLM-style ([], [1] or [E]).
    The layer is prepared on every call: build it once with ``layer_from_tensors`` for repeated use.
    """
    hidden_states = _adopt(hidden_states)
    backend = _backend_for(hidden_states, backend)
    xt = _norm(hidden_states, "hidden_states")
    router = _router("softmax_topk", int(topk_ids.shape[1]), False,
                     apply_router_weight_on_input=apply_router_weight_on_input)
    d = _layer_desc(DTYPES[xt[1]], hidden_states.shape[1], w1, w2, int(topk_ids.shape[1]), router, activation,
                    global_num_experts, expert_map, backend, scheme=scheme, act_quant=act_quant,
                    use_fp8_w8a8=use_fp8_w8a8, use_int8_w8a8=use_int8_w8a8, use_int8_w8a16=use_int8_w8a16,
                    use_int4_w4a16=use_int4_w4a16, use_mxfp4_w4a16=use_mxfp4_w4a16, use_nvfp4_w4a4=use_nvfp4_w4a4,
                    per_channel_quant=per_channel_quant, w1_scale=w1_scale, w2_scale=w2_scale, w1_zp=w1_zp,
                    w2_zp=w2_zp, a1_scale=a1_scale, a2_scale=a2_scale, block_shape=block_shape, w1_bias=w1_bias,
                    w2_bias=w2_bias, group_size=group_size, w1_g_idx=w1_g_idx, w2_g_idx=w2_g_idx,
                    w1_global_scale=w1_global_scale, w2_global_scale=w2_global_scale)
    target = out
    if out is None:  # inplace: computed into a fresh buffer, then copied (the kernels never alias x and y)
        out = _empty(hidden_states, tuple(hidden_states.shape), xt[1])
    with _device_of(hidden_states):
        _ext.fused_experts(d, xt, _norm(topk_weights, "topk_weights"), _norm(topk_ids, "topk_ids"),
                           _norm_out(out, "out"), _stream(hidden_states, stream))
    if inplace and target is None:
        if _framework(hidden_states) == "numpy":
            import numpy as np
            np.copyto(hidden_states, out)
        else:
            hidden_states[...] = out  # torch / CuPy: a device copy on the current stream
        return hidden_states
    return out


def layer_from_tensors(w1, w2, *, top_k, hidden_dtype="BF16", router="softmax_topk", renormalize=False,
                       router_bias=None, scoring="sigmoid", num_groups=1, topk_group=1, routed_scaling_factor=1.0,
                       apply_router_weight_on_input=False, activation="silu", global_num_experts=-1,
                       expert_map=None, backend="cpu", copy=True, shared_expert=None, **quant):
    """A prepared Layer from canonical tensors, for engines that load weights themselves.

    Takes fused_experts' weight and scheme keywords (w1_scale, w2_zp, block_shape, scheme, ...).
    hidden_dtype: the dtype of x and y ("BF16", "F16", "F32"). copy=False borrows host weights (the
    Layer keeps references to them; do not modify them while it lives). shared_expert: a dict with
    w1, w2 and the same weight keywords (E = 1).
    """
    if hidden_dtype not in ("BF16", "F16", "F32"):
        raise BadInputError(f"hidden_dtype {hidden_dtype!r} must be 'BF16', 'F16' or 'F32'")
    hidden = int(w2.shape[1])
    r = _router(router, top_k, renormalize, scoring, num_groups, topk_group, routed_scaling_factor,
                apply_router_weight_on_input)
    quant.setdefault("scheme", None)
    d = _layer_desc(hidden_dtype, hidden, w1, w2, top_k, r, activation, global_num_experts, expert_map, backend,
                    **quant)
    if router_bias is not None:
        d["router_bias"] = _norm(router_bias, "router_bias")
    if shared_expert is not None:
        sq = dict(shared_expert)
        sw1, sw2 = sq.pop("w1"), sq.pop("w2")
        sq.setdefault("scheme", None)
        d["shared_expert"] = _experts_desc(hidden_dtype, hidden, sw1, sw2, **sq)
    d["borrow"] = not copy
    if _is_cuda(w1) or _is_cuda(w2):
        # Device weights are copied to the host for preparation on the legacy default stream: let
        # the producer's stream finish writing them first.
        if _framework(w1) == "torch":
            import torch
            torch.cuda.current_stream(w1.device).synchronize()
        elif _framework(w1) == "cupy":
            import cupy
            cupy.cuda.get_current_stream().synchronize()
    keep = (d,) if not copy else ()
    with _device_of(w1 if _is_cuda(w1) else None):
        return Layer(_ext.layer_create(d), keep)


# ---- checkpoints ----------------------------------------------------------------------------

def _from_view(view, code):
    """A checkpoint tensor view (NumPy, read-only) with bf16 / fp8 reinterpreted through ml_dtypes."""
    name = DTYPES[code]
    if name in _EXOTIC and name != "F8_E8M0":
        try:
            import ml_dtypes
        except ImportError:
            return view  # the raw bit patterns (uint16 / uint8)
        return view.view({"BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
                          "F8_E5M2": ml_dtypes.float8_e5m2}[name])
    return view


class CheckpointLayer:
    """One MoE layer of a checkpoint: its inspect info, tensors, and prepared Layers per backend."""

    def __init__(self, ckpt, index, info):
        self._ckpt, self.index, self.info = ckpt, index, info
        self.layer = info["layer"]
        self.prefix = info["prefix"]
        self.scheme = info["scheme"]
        self._prepared = {}

    def __repr__(self):
        return f"qmoe.CheckpointLayer({self.prefix!r}, scheme={self.scheme!r})"

    def tensor(self, name):
        """A read-only NumPy view of a canonical tensor ("router_weight", "w13.weight", "w2.scale", ...)."""
        return self._ckpt.tensor(self.index, name)

    @property
    def router_weight(self):
        return self.tensor("router_weight")

    def prepare(self, backend="cpu", like=None):
        """The Layer prepared for `backend` (built once per backend and CUDA device, then cached).
        CUDA layers are prepared on the device of `like` (a CUDA array) or the current device."""
        backend = _backend_for(None, backend or "cpu")
        key = backend
        if backend == "cuda" and like is not None and _is_cuda(like):
            key = ("cuda", str(like.device))
        if key not in self._prepared:
            with _device_of(like if backend == "cuda" else None):
                self._prepared[key] = self._ckpt.layer(self.index, backend)
        return self._prepared[key]

    def forward(self, x, router_logits, *, backend=None, out=None, stream=None):
        """x [M, H], router_logits [M, E] -> y [M, H]. backend defaults to "cuda" for CUDA inputs, else "cpu"."""
        return self.prepare(_backend_for(x, backend), x).forward(x, router_logits, out=out, stream=stream)

    __call__ = forward

    def forward_routed(self, x, topk_weights, topk_ids, *, backend=None, out=None, stream=None):
        return self.prepare(_backend_for(x, backend), x).forward_routed(x, topk_weights, topk_ids, out=out,
                                                                         stream=stream)


class Checkpoint:
    """A loaded model directory: ``info`` (what `qmoe inspect` reports), ``layers``, ``schemes``."""

    def __init__(self, path, tp_rank=0, tp_size=1, ep_rank=0, ep_size=1, layers=None):
        self.path = os.fspath(path)
        only = [int(v) for v in layers] if layers is not None else []
        self._c = _ext.Checkpoint(self.path, int(tp_rank), int(tp_size), int(ep_rank), int(ep_size), only)
        self.info = json.loads(self._c.info_json())
        self.arch = self.info["arch"]
        self.quant_method = self.info["quant_method"]
        self.layers = [CheckpointLayer(self, i, li) for i, li in enumerate(self.info["layers"])]

    def __repr__(self):
        return f"qmoe.Checkpoint({self.path!r}, arch={self.arch!r}, {len(self.layers)} MoE layers)"

    def __len__(self):
        return len(self.layers)

    def __getitem__(self, i):
        return self.layers[i]

    @property
    def schemes(self):
        """The scheme key of every MoE layer, in order."""
        return [li.scheme for li in self.layers]

    def tensor(self, index, name):
        view, code = self._c.tensor(int(index), name)
        return _from_view(view, code)

    def layer(self, index, backend="cpu"):
        """MoE layer `index` prepared for `backend` (a new Layer each call)."""
        if backend not in BACKENDS:
            raise BadInputError(f"backend {backend!r} is not one of {BACKENDS}")
        return Layer(self._c.layer(int(index), BACKENDS.index(backend)))


def load(path, tp_rank=0, tp_size=1, *, ep_rank=0, ep_size=1, layers=None):
    """Loads a checkpoint directory (config.json + safetensors). tp / ep split I / E as in vLLM;
    `layers` restricts loading to those decoder layer indices."""
    return Checkpoint(path, tp_rank, tp_size, ep_rank, ep_size, layers)
