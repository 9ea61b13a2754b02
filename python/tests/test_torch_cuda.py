"""qmoe from torch CUDA tensors: routing, align, fused_experts and checkpoint layers on the CUDA
backend against the float64 oracle (moe_oracle.py), on the caller's stream. Skips, saying why,
without torch, without a CUDA device, or in a build without the CUDA backend.

Tolerances: the bf16 cases use the oracle's bound (one bf16 ulp per intermediate h, fp32 sums,
final rounding). For int4 weights the kernels may round dequantized weights (u - 8) * s to bf16
before the MMA (docs/numerics.md): moe_oracle.moe_bf16_weights_bound also admits that.
"""
import numpy as np
import pytest

import moe_oracle as orc
import qmoe

torch = pytest.importorskip("torch", reason="torch is not installed: the CUDA tests run from torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")

DEV = "cuda"


def f64(t):
    return t.detach().float().cpu().numpy().astype(np.float64)


def rand_signed(gen, shape, lo, hi, dtype=torch.float32, device=DEV):
    mag = torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo
    sign = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0).double()
    return (mag * sign).to(dtype).to(device)


@pytest.fixture
def gen_t():
    return torch.Generator().manual_seed(4321)


@pytest.fixture(scope="module", autouse=True)
def needs_cuda_backend():
    w1 = torch.ones((2, 256, 256), dtype=torch.bfloat16)
    w2 = torch.ones((2, 256, 128), dtype=torch.bfloat16)
    try:
        qmoe.layer_from_tensors(w1, w2, top_k=1, backend="cuda")
    except qmoe.UnsupportedError as e:
        pytest.skip(f"the CUDA backend is not available: {e}")


def assert_within(y, yref, bound, what):
    err = np.abs(f64(y) - yref)
    bad = err > bound
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert not bad.any(), (f"{what}: {bad.sum()} of {err.size} outside the bound; worst {worst}: got "
                           f"{f64(y)[worst]}, oracle {yref[worst]}, bound {bound[worst]}")


def test_route_and_align_on_cuda_match_the_host(gen_t):
    logits = rand_signed(gen_t, (37, 16), 0.05, 3.0)
    w, ids = qmoe.route(logits, top_k=4, renormalize=True)
    assert w.is_cuda and ids.is_cuda and w.dtype == torch.float32 and ids.dtype == torch.int32
    hw, hids = qmoe.route(logits.cpu().numpy(), top_k=4, renormalize=True)
    np.testing.assert_array_equal(ids.cpu().numpy(), hids)
    np.testing.assert_allclose(w.cpu().numpy(), hw, rtol=0, atol=1e-6)  # device vs host expf: a few ulps
    s, e, n = qmoe.align_block_size(ids, 16, 16)
    hs, he, hn = qmoe.align_block_size(hids, 16, 16)
    assert s.is_cuda and e.is_cuda and n.is_cuda
    np.testing.assert_array_equal(s.cpu().numpy(), hs)
    np.testing.assert_array_equal(e.cpu().numpy(), he)
    np.testing.assert_array_equal(n.cpu().numpy(), hn)


@pytest.mark.parametrize("m", [1, 7, 64, 300])
def test_fused_experts_bf16_on_cuda_matches_oracle(gen_t, m):
    E, H, I, K = 8, 256, 128, 2
    w1 = rand_signed(gen_t, (E, 2 * I, H), 0.02, 0.2, torch.bfloat16)
    w2 = rand_signed(gen_t, (E, H, I), 0.02, 0.2, torch.bfloat16)
    x = rand_signed(gen_t, (m, H), 0.1, 1.5, torch.bfloat16)
    w, ids = qmoe.route(rand_signed(gen_t, (m, E), 0.05, 2.0), top_k=K, renormalize=True)
    layer = qmoe.layer_from_tensors(w1, w2, top_k=K, renormalize=True, backend="cuda")
    assert layer.backend == "cuda"
    y = layer.forward_routed(x, w, ids)
    assert y.is_cuda and y.dtype == torch.bfloat16 and y.shape == (m, H)
    yref, bound = orc.moe(f64(x), f64(w1), f64(w2), w.cpu().numpy(), ids.cpu().numpy())
    assert_within(y, yref, bound, f"bf16 layer on cuda, M={m}")
    y_fused = qmoe.fused_experts(x, w1, w2, w, ids)  # backend follows the device: cuda
    assert_within(y_fused, yref, bound, f"fused_experts on cuda, M={m}")
    # Host tensors on the CUDA backend are staged through the device: same kernels, same bits.
    y_host = layer.forward_routed(x.cpu(), w.cpu(), ids.cpu())
    assert not y_host.is_cuda
    assert torch.equal(y_host.view(torch.int16), y.cpu().view(torch.int16))


@pytest.mark.parametrize("m", [1, 5, 64, 300])
def test_fp8_weight_only_on_cuda_matches_oracle(gen_t, m):
    # FP8 weight-only (e4m3 codes, one fp32 scale per output channel, bf16 activations): the CUDA
    # backend multiplies the codes as exact bf16 operands and scales the fp32 sums, so the result is
    # the bf16 layer's on the dequantized weights (codes x scale in float64) within the oracle's bound
    E, H, I, K = 6, 256, 136, 2
    codes1 = rand_signed(gen_t, (E, 2 * I, H), 0.02, 1.0).to(torch.float8_e4m3fn)
    codes2 = rand_signed(gen_t, (E, H, I), 0.02, 1.0).to(torch.float8_e4m3fn)
    s1 = (torch.rand((E, 2 * I, 1), generator=gen_t) * 0.2 + 0.05).to(DEV)
    s2 = (torch.rand((E, H, 1), generator=gen_t) * 0.2 + 0.05).to(DEV)
    x = rand_signed(gen_t, (m, H), 0.1, 1.5, torch.bfloat16)
    w, ids = qmoe.route(rand_signed(gen_t, (m, E), 0.05, 2.0), top_k=K, renormalize=True)
    y = qmoe.fused_experts(x, codes1, codes2, w, ids, scheme="fp8_a16", per_channel_quant=True, w1_scale=s1,
                           w2_scale=s2)
    assert y.is_cuda and y.dtype == torch.bfloat16 and y.shape == (m, H)
    w13 = f64(codes1) * f64(s1)
    w2d = f64(codes2) * f64(s2)
    yref, bound = orc.moe(f64(x), w13, w2d, w.cpu().numpy(), ids.cpu().numpy())
    assert_within(y, yref, bound, f"fp8 weight-only on cuda, M={m}")


def test_the_callers_stream_orders_inputs_and_outputs(gen_t):
    E, H, I = 8, 512, 256
    w1 = rand_signed(gen_t, (E, 2 * I, H), 0.02, 0.2, torch.bfloat16)
    w2 = rand_signed(gen_t, (E, H, I), 0.02, 0.2, torch.bfloat16)
    layer = qmoe.layer_from_tensors(w1, w2, top_k=2, backend="cuda")
    x_src = rand_signed(gen_t, (64, H), 0.1, 1.5, torch.bfloat16)
    logits = rand_signed(gen_t, (64, E), 0.05, 2.0)
    expect = layer.forward(x_src, logits)
    torch.cuda.synchronize()

    big = torch.randn((4096, 4096), device=DEV, dtype=torch.bfloat16)
    x = torch.zeros_like(x_src)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(8):  # keep the side stream busy so a wrong stream would read x early
            big = (big @ big).clamp_(-1, 1)
        x.copy_(x_src)
        y = layer.forward(x, logits)  # must run on `side`, after the copy
        y_seen = y.clone()            # ordered after qmoe's writes only if qmoe used `side`
    side.synchronize()
    assert torch.equal(y_seen.view(torch.int16), expect.view(torch.int16))


def test_mixed_devices_are_bad_input(gen_t):
    w1 = rand_signed(gen_t, (4, 256, 128), 0.02, 0.2, torch.bfloat16)
    w2 = rand_signed(gen_t, (4, 128, 128), 0.02, 0.2, torch.bfloat16)
    layer = qmoe.layer_from_tensors(w1, w2, top_k=1, backend="cuda")
    x = rand_signed(gen_t, (3, 128), 0.1, 1, torch.bfloat16)
    with pytest.raises(qmoe.BadInputError, match="router_logits is on cpu"):
        layer.forward(x, torch.zeros((3, 4)))
    ref_layer = qmoe.layer_from_tensors(w1.cpu(), w2.cpu(), top_k=1, backend="reference")
    with pytest.raises(qmoe.BadInputError, match="runs on host tensors"):
        ref_layer.forward(x, torch.zeros((3, 4), device=DEV))


@pytest.mark.parametrize("fmt", ["bf16", "ct-w4a16"])
def test_checkpoint_layers_on_cuda_match_oracle(gen, gen_t, fmt):
    ck = qmoe.load(gen("mixtral", fmt, layers=1, experts=8, hidden=256, intermediate=128, seed=9))
    li = ck.layers[0]
    x = rand_signed(gen_t, (33, 256), 0.1, 1.5, torch.bfloat16)
    logits = rand_signed(gen_t, (33, 8), 0.05, 2.0)
    y = li.forward(x, logits)  # CUDA inputs: prepared for "cuda"
    assert li.prepare("cuda", x).backend == "cuda" and y.is_cuda
    w, ids = qmoe.route(logits.cpu().numpy(), top_k=li.info["router"]["top_k"],
                        renormalize=li.info["router"]["renormalize"])
    if fmt == "bf16":
        w13, w2 = orc.as_f64(li.tensor("w13.weight")), orc.as_f64(li.tensor("w2.weight"))
    else:
        w13 = orc.dequant_int4_sym(li.tensor("w13.weight"), li.tensor("w13.scale"), 128)
        w2 = orc.dequant_int4_sym(li.tensor("w2.weight"), li.tensor("w2.scale"), 128)
    yref, bound = orc.moe_bf16_weights_bound(f64(x), w13, w2, w, ids)
    assert_within(y, yref, bound, f"{fmt} checkpoint layer on cuda")


def test_cupy_arrays_when_installed(gen_t):
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    logits = cupy.asarray(rand_signed(gen_t, (9, 6), 0.05, 3.0).cpu().numpy())
    w, ids = qmoe.route(logits, top_k=2)
    assert isinstance(w, cupy.ndarray) and isinstance(ids, cupy.ndarray)
    hw, hids = qmoe.route(cupy.asnumpy(logits), top_k=2)
    np.testing.assert_array_equal(cupy.asnumpy(ids), hids)
    np.testing.assert_allclose(cupy.asnumpy(w), hw, rtol=0, atol=1e-6)
