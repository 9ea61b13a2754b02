"""qmoe from NumPy on the CPU: routing, align, fused_experts / layers / checkpoints against float64
oracles (moe_oracle.py) with per-element bounds, the different Python paths into the C++
reference bit-identical to each other, and qmoe's errors as Python exceptions.
"""
import numpy as np
import pytest

import moe_oracle as orc
import qmoe

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 / float8 arrays on NumPy need ml_dtypes")
BF16 = ml_dtypes.bfloat16


def rand_signed(rng, shape, lo, hi):
    """Magnitudes in [lo, hi] with random signs: never zero, so no term can hide."""
    return rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


# ---- basics and errors ------------------------------------------------------------------------

def test_version():
    assert qmoe.C_API_VERSION == 1
    assert qmoe.__version__.count(".") == 2


def test_errors_carry_qmoe_messages_and_builtin_bases():
    with pytest.raises(qmoe.BadInputError, match="router logits: expected F32, BF16 or F16, got I32") as ei:
        qmoe.route(np.zeros((3, 4), np.int32), top_k=2)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, qmoe.Error)
    with pytest.raises(ValueError, match="/nonexistent/qmoe-py-test"):
        qmoe.load("/nonexistent/qmoe-py-test")
    with pytest.raises(qmoe.BadInputError, match="not one of"):
        qmoe.route(np.zeros((3, 4), np.float32), top_k=1, kind="nope")


def test_unsupported_backend_is_not_implemented_error(rng):
    w1 = rand_signed(rng, (3, 16, 32), 0.1, 1).astype(BF16)
    w2 = rand_signed(rng, (3, 32, 8), 0.1, 1).astype(BF16)
    try:
        qmoe.layer_from_tensors(w1, w2, top_k=1, backend="cuda")
    except qmoe.UnsupportedError as e:  # CPU-only build, or no GPU on this machine
        assert isinstance(e, NotImplementedError)
        assert "cuda" in str(e)
    else:
        pytest.skip("a CUDA device is present: the CUDA backend accepted the layer")


# ---- routing and align --------------------------------------------------------------------------

@pytest.mark.parametrize("renormalize", [False, True])
def test_route_softmax_topk_matches_oracle(rng, renormalize):
    logits = rand_signed(rng, (13, 7), 0.05, 3.0).astype(np.float32)
    logits[4, 2] = logits[4, 5] = 6.0  # a tie: expert 2 must come first
    w, ids = qmoe.route(logits, top_k=3, renormalize=renormalize)
    ew, eids = orc.softmax_topk(logits, 3, renormalize)
    assert w.dtype == np.float32 and ids.dtype == np.int32 and w.shape == (13, 3)
    np.testing.assert_array_equal(ids, eids)
    np.testing.assert_allclose(w, ew, rtol=0, atol=4e-7)  # fp32 softmax: a few ulps of 1


def test_route_other_kinds_match_oracles(rng):
    logits = rand_signed(rng, (11, 6), 0.05, 3.0).astype(np.float32)
    order = np.argsort(-logits.astype(np.float64), axis=1, kind="stable")
    sig = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    # sigmoid per expert, top-2, renormalized
    w, ids = qmoe.route(logits, top_k=2, kind="sigmoid_topk", renormalize=True)
    np.testing.assert_array_equal(ids, order[:, :2])
    sel = np.take_along_axis(sig, order[:, :2], axis=1)
    np.testing.assert_allclose(w, sel / sel.sum(axis=1, keepdims=True), rtol=0, atol=4e-7)
    # top-2 on logits, softmax over the two (gpt-oss)
    w, ids = qmoe.route(logits, top_k=2, kind="topk_softmax")
    np.testing.assert_array_equal(ids, order[:, :2])
    z = np.take_along_axis(logits.astype(np.float64), order[:, :2], axis=1)
    np.testing.assert_allclose(w, np.exp(z) / np.exp(z).sum(axis=1, keepdims=True), rtol=0, atol=4e-7)
    # Llama 4: top-1, weight = sigmoid(logit)
    w, ids = qmoe.route(logits, top_k=1, kind="llama4")
    np.testing.assert_array_equal(ids[:, 0], order[:, 0])
    np.testing.assert_allclose(w[:, 0], np.take_along_axis(sig, order[:, :1], axis=1)[:, 0], rtol=0, atol=4e-7)


def test_route_accepts_bf16_logits(rng):
    logits = rand_signed(rng, (5, 9), 0.05, 3.0).astype(BF16)
    w, ids = qmoe.route(logits, top_k=2, renormalize=True)
    ew, eids = orc.softmax_topk(logits.astype(np.float32), 2, True)
    np.testing.assert_array_equal(ids, eids)
    np.testing.assert_allclose(w, ew, rtol=0, atol=4e-7)


@pytest.mark.parametrize("with_map", [False, True])
def test_align_block_size_matches_oracle(rng, with_map):
    num_experts, block = 7, 4
    ids = rng.integers(0, num_experts - 1, (9, 3)).astype(np.int32)  # the last expert gets nothing
    emap = np.array([2, -1, 0, 1, -1, 3, 4], np.int32) if with_map else None
    sorted_ids, expert_ids, ntp = qmoe.align_block_size(ids, block, num_experts, emap)
    es, ee, used = orc.align(ids, num_experts, block, emap)
    cap = (ids.size + num_experts * (block - 1) + block - 1) // block * block
    assert sorted_ids.shape == (cap,) and expert_ids.shape == (cap // block,) and ntp.shape == (1,)
    assert int(ntp[0]) == used
    np.testing.assert_array_equal(sorted_ids[:used], es)
    assert (sorted_ids[used:] == ids.size).all()  # padding = the sentinel numel
    np.testing.assert_array_equal(expert_ids[: used // block], ee)
    assert (expert_ids[used // block:] == -1).all()


# ---- fused experts and layers ---------------------------------------------------------------

E, H, I, M, K = 6, 72, 40, 11, 2


def bf16_problem(rng):
    w1 = rand_signed(rng, (E, 2 * I, H), 0.02, 0.25).astype(BF16)
    w2 = rand_signed(rng, (E, H, I), 0.02, 0.25).astype(BF16)
    x = rand_signed(rng, (M, H), 0.1, 1.5).astype(BF16)
    logits = rand_signed(rng, (M, E), 0.05, 2.0).astype(np.float32)
    return w1, w2, x, logits


def assert_within(y, yref, bound, what):
    err = np.abs(orc.as_f64(y) - yref)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert (err <= bound).all(), (f"{what}: {(err > bound).sum()} of {err.size} elements outside the bound; "
                                  f"worst {worst}: got {orc.as_f64(y)[worst]}, oracle {yref[worst]}, "
                                  f"bound {bound[worst]}")


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_fused_experts_bf16_matches_oracle(rng, backend):
    w1, w2, x, logits = bf16_problem(rng)
    w, ids = qmoe.route(logits, top_k=K, renormalize=True)
    y = qmoe.fused_experts(x, w1, w2, w, ids, backend=backend)
    assert y.dtype == BF16 and y.shape == (M, H)
    yref, bound = orc.moe(orc.as_f64(x), orc.as_f64(w1), orc.as_f64(w2), w, ids)
    assert_within(y, yref, bound, f"fused_experts on {backend}")


def test_the_python_paths_into_the_reference_agree_bitwise(rng):
    w1, w2, x, logits = bf16_problem(rng)
    layer = qmoe.layer_from_tensors(w1, w2, top_k=K, renormalize=True, backend="reference")
    assert (layer.backend, layer.hidden, layer.intermediate, layer.num_experts, layer.top_k) == \
        ("reference", H, I, E, K)
    assert layer.act_dtype == "BF16" and layer.scheme == "unquantized"
    y1 = layer.forward(x, logits)
    w, ids = qmoe.route(logits, top_k=K, renormalize=True)
    y2 = layer.forward_routed(x, w, ids)
    y3 = qmoe.fused_experts(x, w1, w2, w, ids, backend="reference")
    out = np.empty((M, H), BF16)
    y4 = layer(x, logits, out=out)
    assert y4 is out
    borrowed = qmoe.layer_from_tensors(w1, w2, top_k=K, renormalize=True, backend="reference", copy=False)
    y5 = borrowed.forward(np.asfortranarray(x), logits)  # non-contiguous input: made contiguous
    x_in = x.copy()
    y6 = qmoe.fused_experts(x_in, w1, w2, w, ids, backend="reference", inplace=True)
    assert y6 is x_in
    for other in (y2, y3, y4, y5, y6):
        np.testing.assert_array_equal(bits(y1), bits(other))


def test_output_must_be_contiguous(rng):
    w1, w2, x, logits = bf16_problem(rng)
    layer = qmoe.layer_from_tensors(w1, w2, top_k=K, backend="reference")
    with pytest.raises(qmoe.BadInputError, match="contiguous"):
        layer.forward(x, logits, out=np.empty((H, M), BF16).T)
    with pytest.raises(qmoe.BadInputError, match=r"x: expected BF16 \[11, 72\], got F32"):
        layer.forward(x.astype(np.float32), logits)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_fused_experts_int4_group_matches_oracle(rng, backend):
    group = 8  # divides H = 72 and I = 40
    u13 = rng.integers(0, 16, (E, 2 * I, H))
    u2 = rng.integers(0, 16, (E, H, I))
    s13 = rng.uniform(0.002, 0.03, (E, 2 * I, H // group)).astype(BF16)
    s2 = rng.uniform(0.002, 0.03, (E, H, I // group)).astype(BF16)
    x = rand_signed(rng, (M, H), 0.1, 1.5).astype(BF16)
    logits = rand_signed(rng, (M, E), 0.05, 2.0).astype(np.float32)
    w, ids = qmoe.route(logits, top_k=K, renormalize=True)
    p13, p2 = orc.pack_int4(u13), orc.pack_int4(u2)
    y = qmoe.fused_experts(x, p13, p2, w, ids, use_int4_w4a16=True, w1_scale=s13, w2_scale=s2, backend=backend)
    w13 = orc.dequant_int4_sym(p13, s13, group)
    w2d = orc.dequant_int4_sym(p2, s2, group)
    yref, bound = orc.moe(orc.as_f64(x), w13, w2d, w, ids)
    assert_within(y, yref, bound, f"int4 g{group} on {backend}")
    layer = qmoe.layer_from_tensors(p13, p2, top_k=K, renormalize=True, scheme="wna16", w1_scale=s13,
                                    w2_scale=s2, backend=backend)
    assert layer.scheme == f"wna16/int4/g{group}/sym"


def test_fp8_vllm_style_scalar_scales_equal_canonical_ones(rng):
    w1 = rng.uniform(-1, 1, (E, 2 * I, H)).astype(ml_dtypes.float8_e4m3fn)
    w2 = rng.uniform(-1, 1, (E, H, I)).astype(ml_dtypes.float8_e4m3fn)
    ws1 = rng.uniform(0.005, 0.02, (E,)).astype(np.float32)
    ws2 = rng.uniform(0.005, 0.02, (E,)).astype(np.float32)
    a1 = np.float32([1.5 / 448])
    a2 = np.float32([0.5 / 448])
    x = rand_signed(rng, (M, H), 0.1, 1.5).astype(BF16)
    w, ids = qmoe.route(rand_signed(rng, (M, E), 0.05, 2.0).astype(np.float32), top_k=K)
    y_vllm = qmoe.fused_experts(x, w1, w2, w, ids, use_fp8_w8a8=True, w1_scale=ws1, w2_scale=ws2, a1_scale=a1,
                                a2_scale=a2, backend="reference")
    y_canon = qmoe.fused_experts(x, w1, w2, w, ids, scheme="fp8_w8a8", act_quant="fp8_tensor",
                                 w1_scale=np.repeat(ws1[:, None], 2, axis=1), w2_scale=ws2[:, None],
                                 a1_scale=np.full((E, 2), a1[0], np.float32),
                                 a2_scale=np.full((E, 1), a2[0], np.float32), backend="reference")
    np.testing.assert_array_equal(bits(y_vllm), bits(y_canon))
    # The scales matter: doubling the weight scales doubles y (exact: powers of two).
    y2 = qmoe.fused_experts(x, w1, w2, w, ids, use_fp8_w8a8=True, w1_scale=ws1, w2_scale=2 * ws2, a1_scale=a1,
                            a2_scale=a2, backend="reference")
    np.testing.assert_array_equal(orc.as_f64(y2), 2 * orc.as_f64(y_vllm))


# ---- checkpoints ----------------------------------------------------------------------------

def test_checkpoint_bf16_layers_match_oracle(gen, rng):
    path = gen("mixtral", "bf16", layers=2, experts=6, hidden=128, intermediate=64, seed=3)
    ck = qmoe.load(path)
    assert ck.arch == "mixtral" and ck.quant_method == "none" and len(ck) == 2
    assert ck.schemes == ["unquantized", "unquantized"]
    for li in ck.layers:
        info = li.info
        assert (info["num_experts"], info["hidden"], info["intermediate"]) == (6, 128, 64)
        assert info["tensors"]["w13.weight"] == {"dtype": "BF16", "shape": [6, 128, 128]}
        rw = li.router_weight
        assert rw.dtype == BF16 and rw.shape == (6, 128) and not rw.flags.writeable
        x = rand_signed(rng, (7, 128), 0.1, 1.5).astype(BF16)
        logits = (orc.as_f64(x) @ orc.as_f64(rw).T).astype(np.float32)
        y = li.forward(x, logits)  # "cpu" for NumPy inputs
        assert li.prepare("cpu").backend == "cpu"
        w, ids = qmoe.route(logits, top_k=info["router"]["top_k"], renormalize=info["router"]["renormalize"])
        w13, w2 = li.tensor("w13.weight"), li.tensor("w2.weight")
        yref, bound = orc.moe(orc.as_f64(x), orc.as_f64(w13), orc.as_f64(w2), w, ids)
        assert_within(y, yref, bound, f"{li.prefix} on cpu")
        # The checkpoint's reference layer and fused_experts over its canonical tensors: same bits.
        y_ref = li.forward(x, logits, backend="reference")
        y_fused = qmoe.fused_experts(x, w13, w2, w, ids, backend="reference")
        np.testing.assert_array_equal(bits(y_ref), bits(y_fused))
        assert_within(y_ref, yref, bound, f"{li.prefix} on reference")


def test_checkpoint_int4_layer_matches_oracle(gen, rng):
    path = gen("mixtral", "ct-w4a16", layers=1, experts=4, hidden=256, intermediate=128, seed=5)
    ck = qmoe.load(path)
    assert ck.quant_method == "compressed-tensors" and ck.schemes == ["wna16/int4/g128/sym"]
    li = ck.layers[0]
    p13, s13 = li.tensor("w13.weight"), li.tensor("w13.scale")
    p2, s2 = li.tensor("w2.weight"), li.tensor("w2.scale")
    assert p13.dtype == np.uint8 and p13.shape == (4, 256, 128) and s13.shape == (4, 256, 2)
    x = rand_signed(rng, (5, 256), 0.1, 1.5).astype(BF16)
    logits = rand_signed(rng, (5, 4), 0.05, 2.0).astype(np.float32)
    w, ids = qmoe.route(logits, top_k=li.info["router"]["top_k"], renormalize=li.info["router"]["renormalize"])
    yref, bound = orc.moe(orc.as_f64(x), orc.dequant_int4_sym(p13, s13, 128), orc.dequant_int4_sym(p2, s2, 128), w,
                          ids)
    for backend in ("reference", "cpu"):
        assert_within(li.forward(x, logits, backend=backend), yref, bound, f"ct-w4a16 on {backend}")
    y_fused = qmoe.fused_experts(x, p13, p2, w, ids, use_int4_w4a16=True, w1_scale=s13, w2_scale=s2,
                                 backend="reference")
    np.testing.assert_array_equal(bits(li.forward(x, logits, backend="reference")), bits(y_fused))


def test_checkpoint_tensor_parallel_ranks_sum_to_the_full_layer(gen, rng):
    path = gen("mixtral", "bf16", layers=2, experts=6, hidden=128, intermediate=64, seed=3)
    full = qmoe.load(path, layers=[1])
    assert len(full) == 1 and full.layers[0].layer == 1
    ranks = [qmoe.load(path, tp_rank=r, tp_size=2, layers=[1]) for r in range(2)]
    assert [rk.layers[0].info["intermediate"] for rk in ranks] == [32, 32]
    x = rand_signed(rng, (6, 128), 0.1, 1.5).astype(BF16)
    logits = rand_signed(rng, (6, 6), 0.05, 2.0).astype(np.float32)
    ys = [rk.layers[0].forward(x, logits, backend="reference") for rk in ranks]
    w, ids = qmoe.route(logits, top_k=2, renormalize=full.layers[0].info["router"]["renormalize"])
    li = full.layers[0]
    yref, bound = orc.moe(orc.as_f64(x), orc.as_f64(li.tensor("w13.weight")), orc.as_f64(li.tensor("w2.weight")),
                          w, ids)
    # Each rank rounds its partial sum to bf16 once: one ulp of each instead of one of the total.
    total = orc.as_f64(ys[0]) + orc.as_f64(ys[1])
    bound = bound - orc.ulp_bf16(yref) + orc.ulp_bf16(ys[0].astype(np.float32)) + \
        orc.ulp_bf16(ys[1].astype(np.float32))
    assert_within(total, yref, bound, "tp ranks 0 + 1")
    with pytest.raises(qmoe.BadInputError, match="tp_rank"):
        qmoe.load(path, tp_rank=2, tp_size=2)


def test_checkpoint_tensor_errors_name_what_exists(gen):
    ck = qmoe.load(gen("mixtral", "bf16", layers=2, experts=6, hidden=128, intermediate=64, seed=3))
    with pytest.raises(qmoe.BadInputError, match=r"no tensor 'w13.scale'; it has router_weight, w13.weight"):
        ck.tensor(0, "w13.scale")
    with pytest.raises(qmoe.BadInputError, match=r"outside \[0, 2\)"):
        ck.layer(2)


def test_a_header_quoting_binary_bytes_gives_bad_input(gen, tmp_path):
    # a header length that runs into the data: the JSON parser's message quotes binary bytes, which
    # qmoe escapes (a raw byte used to surface as RuntimeError("UnicodeDecodeError ..."))
    import shutil
    import struct
    src = gen("mixtral", "bf16", layers=1, experts=4, hidden=64, intermediate=32, seed=5)
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    st = next(dst.glob("*.safetensors"))
    raw = bytearray(st.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    raw[:8] = struct.pack("<Q", n + 64)
    raw[8 + n:8 + n + 4] = b"\xd7\x01\xfe\x80"
    st.write_bytes(bytes(raw))
    with pytest.raises(qmoe.BadInputError, match=r"invalid JSON.*\\x") as ei:
        qmoe.load(str(dst))
    assert st.name in str(ei.value)


# ---- torch CPU tensors (when torch is installed) ---------------------------------------------

def test_torch_cpu_tensors_give_the_numpy_bits(rng):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    w1, w2, x, logits = bf16_problem(rng)
    w, ids = qmoe.route(logits, top_k=K, renormalize=True)
    y_np = qmoe.fused_experts(x, w1, w2, w, ids, backend="reference")

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)

    tw, tids = qmoe.route(torch.from_numpy(logits), top_k=K, renormalize=True)
    assert isinstance(tw, torch.Tensor) and tw.dtype == torch.float32 and tids.dtype == torch.int32
    y_t = qmoe.fused_experts(t(x), t(w1), t(w2), tw, tids, backend="reference")
    assert isinstance(y_t, torch.Tensor) and y_t.dtype == torch.bfloat16
    np.testing.assert_array_equal(y_t.view(torch.int16).numpy().view(np.uint8), bits(y_np))
