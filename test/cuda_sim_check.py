"""Run every cuda op through the real launcher, in numba's CUDA simulator, against its numpy reference.

Run by test_cuda_simulator.py (`main`, in shards) with NUMBA_ENABLE_CUDASIM=1, with
EMBODIED_ROS_CUDA_CACHE pointing at precompiled PTX. Prints one JSON line per check:
{"op", "case", "ok", "max_abs_err", "error"}. Shapes are tiny (the simulator runs each GPU thread as
a Python thread) but reach every branch: several blocks and tiles, shared and per-row modulation,
grouped heads, masked keys, row counts across the fused/dequantize boundary, every weight type.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cuda_fake_driver  # noqa: E402

cuda_fake_driver.install()

import numpy as np  # noqa: E402

from embodied_ros.kernels import registry  # noqa: E402
from embodied_ros.kernels.cuda.runtime import DeviceTensor, to_device  # noqa: E402
from embodied_ros.kernels.attention import MASKED  # noqa: E402
from embodied_ros.kernels.cpu.ternary_gemm import pack_ternary, ternarize  # noqa: E402
from embodied_ros.kernels.quant import random_quant_tensor  # noqa: E402
from embodied_ros.kernels.rope import rope_tables  # noqa: E402
from embodied_ros.kernels.rope3d import rope3d_tables  # noqa: E402

rng = np.random.default_rng(7)


def normal(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def masked_keys(n: int, masked: range) -> np.ndarray:
    bias = np.zeros(n, np.float32)
    bias[list(masked)] = MASKED
    return bias


def cases():
    """(op, case name, args)."""
    yield "rms_norm", "2x7", (normal(2, 7, scale=3), normal(7, scale=0.1), 1e-6)
    yield "rms_norm", "1x300 (several columns per thread)", (normal(1, 300), normal(300), 1e-6)
    yield "ada_rms_norm", "3x33", (normal(3, 33), normal(33), normal(33), 1e-6)
    yield "layer_norm", "2x40 offset", (normal(2, 40) + 2, 1 + normal(40, scale=0.1), normal(40), 1e-6)
    yield "rms_norm_across_heads", "2x64", (normal(2, 64), 1 + normal(64, scale=0.2), 1e-6)
    yield "modulated_layer_norm", "shared row", (normal(3, 20, scale=3) + 1, normal(1, 20), normal(1, 20), 1e-6)
    yield "modulated_layer_norm", "per token", (normal(3, 20), normal(3, 20), normal(3, 20), 1e-6)
    yield "gated_residual", "shared gate", (normal(3, 10), normal(3, 10), normal(1, 10))
    yield "gated_residual", "per token gate", (normal(3, 10), normal(3, 10), normal(3, 10))
    yield "gelu_tanh", "3x50", (normal(3, 50, scale=4),)
    yield "gelu_tanh_mul", "2x33", (normal(2, 33, scale=4), normal(2, 33))
    yield "gelu_tanh_glu", "3-d, F=17", (normal(2, 1, 34, scale=4),)
    yield "silu", "3-d 2x3x41", (normal(2, 3, 41, scale=4),)
    yield "silu_glu", "2x(2 x 19)", (normal(2, 38, scale=4),)
    yield "silu_glu", "3-d, F=5", (normal(3, 1, 10, scale=4),)
    yield "gelu_erf", "3x50, wide range", (normal(3, 50, scale=4),)
    cos, sin = rope_tables(np.array([0, 5, 999]), 16, 10000.0)
    yield "rope", "3 tokens, 2 heads, d 16", (normal(3, 2, 16), cos, sin)
    cos, sin = rope3d_tables((1, 2, 2), 16, frame_start=3)
    yield "rope_pairs", "grid 1x2x2, 2 heads, d 16", (normal(4, 2, 16), cos, sin)
    q, k, v = normal(2, 1, 8, scale=2), normal(5, 1, 8, scale=2), normal(5, 1, 8)
    yield "attention", "one kv head", (q, k, v)
    bias = np.zeros((2, 5), np.float32)
    bias[0, 1:] = MASKED
    yield "attention", "additive mask", (q, k, v, bias)
    yield "attention", "grouped heads 4/2", (normal(1, 4, 8), normal(3, 2, 8), normal(3, 2, 8))
    yield "attention", "head_dim 160 (two channels per thread)", (normal(1, 1, 160, scale=0.2), normal(3, 1, 160),
                                                                   normal(3, 1, 160))
    k, v = normal(150, 1, 4, scale=2), normal(150, 1, 4)
    yield "attention", "150 keys, first tile masked", (normal(1, 1, 4), k, v, masked_keys(150, range(0, 140))[None])
    yield "cached_attention", "cache over two tiles", (normal(1, 2, 8), normal(140, 1, 8), normal(140, 1, 8), None,
                                                      normal(1, 1, 8), normal(1, 1, 8))
    yield "cached_attention", "masked cache rows", (normal(2, 2, 8), normal(9, 1, 8), normal(9, 1, 8),
                                                    masked_keys(9, range(3, 9)), normal(2, 1, 8), normal(2, 1, 8))
    yield "linear", "float32 + bias", (normal(3, 20), normal(5, 20), normal(5))
    yield "linear", "leading dims, float16 weight", (normal(2, 2, 20), normal(70, 20).astype(np.float16), None)
    yield "linear", "q8_0, 9 rows (two passes)", (normal(9, 64), random_quant_tensor(rng, "q8_0", (3, 64)), normal(3))
    yield "linear", "q4_k, 3 rows", (normal(3, 512), random_quant_tensor(rng, "q4_k", (2, 512)), normal(2))
    yield "linear", "q4_k, one vector", (normal(256), random_quant_tensor(rng, "q4_k", (2, 256)), None)
    yield "linear", "q4_k, 2304 inputs (more groups than threads)", (normal(2, 2304),
                                                                     random_quant_tensor(rng, "q4_k", (1, 2304)), None)
    yield "linear", "q8_0, 2080 inputs (more blocks than threads)", (normal(2, 2080),
                                                                    random_quant_tensor(rng, "q8_0", (1, 2080)), None)
    yield "linear", "q4_k, 65 rows", (normal(65, 256), random_quant_tensor(rng, "q4_k", (2, 256)), None)
    yield "linear", "bf16", (normal(2, 13), random_quant_tensor(rng, "bf16", (4, 13)), normal(4))
    yield "linear", "float32 + bias, 70 features (two tiles)", (normal(3, 20), normal(70, 20), normal(70))
    yield "linear", "transposed input view, float16 weight", (normal(20, 3).T, normal(5, 20).astype(np.float16), None)
    yield "linear", "q8_0 + bias, 65 rows (two tiles)", (normal(65, 32), random_quant_tensor(rng, "q8_0", (2, 32)),
                                                          normal(2))
    yield "feed_forward", "gelu_tanh with biases", (normal(3, 20), normal(24, 20, scale=0.3), normal(24),
                                                     normal(5, 24, scale=0.3), normal(5), "gelu_tanh")
    yield "feed_forward", "silu_glu", (normal(2, 16), normal(2 * 12, 16, scale=0.3), None, normal(7, 12, scale=0.3),
                                       None, "silu_glu")
    yield "dequantize", "q8_0", (random_quant_tensor(rng, "q8_0", (2, 64)),)
    yield "dequantize", "q4_k 3-d", (random_quant_tensor(rng, "q4_k", (2, 1, 512)),)
    yield "dequantize", "bf16", (random_quant_tensor(rng, "bf16", (3, 5)),)
    ternary = pack_ternary(*ternarize(normal(12, 40)))
    yield "linear_ternary", "3 rows + bias", (normal(3, 40, scale=3.0), ternary, normal(12))
    yield "linear_ternary", "leading dims, an all-zero row", (np.concatenate([normal(1, 2, 40), np.zeros((1, 1, 40),
                                                                              np.float32)], axis=1), ternary, None)


def compare(op: str, got, args) -> float:
    ref = registry.reference_of(op)
    expected = ref.fn(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    if np.shape(got) != np.shape(expected):
        raise AssertionError(f"shape {np.shape(got)} != reference {np.shape(expected)}")
    np.testing.assert_allclose(got, expected, rtol=ref.rtol, atol=ref.atol)
    return float(np.max(np.abs(got - expected))) if np.size(expected) else 0.0


def check(op: str, name: str, run) -> None:
    record = {"op": op, "case": name, "ok": False, "max_abs_err": None, "error": None}
    try:
        record["max_abs_err"] = run()
        record["ok"] = True
    except Exception as error:  # noqa: BLE001 - every failure is reported, the next case still runs
        record["error"] = "".join(traceback.format_exception_only(type(error), error)).strip()
    print(json.dumps(record), flush=True)


def device_run(op, args):
    """The same call with every array argument already on the GPU: the result must stay there."""
    def run():
        device_args = [to_device(a) if isinstance(a, np.ndarray) or hasattr(a, "qtype") else a for a in args]
        got = registry.implementations(op)["cuda"](*device_args)
        if not isinstance(got, DeviceTensor):
            raise AssertionError(f"device arguments gave a {type(got).__name__}, not a DeviceTensor")
        return compare(op, got.numpy(), args)
    return run


# which kernels `linear` launches: fused for up to 64 rows of q8_0/q4_k, else dequantize + product
EXPECTED_KERNELS = {
    ("linear", "float32 + bias"): ["matmul_nt"],
    ("linear", "q8_0, 9 rows (two passes)"): ["q8_0_linear"],
    ("linear", "q4_k, 3 rows"): ["q4_k_linear"],
    ("linear", "q4_k, 65 rows"): ["q4_k_rows", "matmul_nt"],
    ("linear", "bf16"): ["bf16_rows", "matmul_nt"],
    ("linear", "float32 + bias, 70 features (two tiles)"): ["matmul_nt"],
    ("linear", "q8_0 + bias, 65 rows (two tiles)"): ["q8_0_rows", "matmul_nt"],
    ("dequantize", "bf16"): ["bf16_rows"],
}


def host_run(op, name, args):
    def run():
        before = len(cuda_fake_driver.launched_kernels())
        got = registry.implementations(op)["cuda"](*args)
        launched = [k.rsplit(".", 1)[1] for k in cuda_fake_driver.launched_kernels()[before:]]
        expected = EXPECTED_KERNELS.get((op, name))
        if expected is not None and launched != expected:
            raise AssertionError(f"launched {launched}, expected {expected}")
        if not isinstance(got, np.ndarray):
            raise AssertionError(f"host arguments gave a {type(got).__name__}, not a numpy array")
        return compare(op, got, args)
    return run


def chain_check():
    """An MLP branch with weights uploaded once and activations kept on the GPU between ops."""
    x, norm_w, down_w = normal(2, 32), normal(32), normal(32, 4)
    gate_w, up_w = (random_quant_tensor(rng, "q8_0", (4, 32)) for _ in range(2))
    ks = registry.KernelSet("numpy")
    h = ks.rms_norm(x, norm_w, 1e-6)
    expected = x + ks.linear(ks.gelu_tanh_mul(ks.linear(h, gate_w), ks.linear(h, up_w)), down_w)

    def run():
        cuda = registry.KernelSet("cuda")
        norm_d, gate_d, up_d, down_d = (to_device(w) for w in (norm_w, gate_w, up_w, down_w))
        x_d = to_device(x)
        h_d = cuda.rms_norm(x_d, norm_d, 1e-6)
        m_d = cuda.gelu_tanh_mul(cuda.linear(h_d, gate_d), cuda.linear(h_d, up_d))
        out = cuda.gated_residual(x_d, cuda.linear(m_d, down_d), to_device(np.ones((1, 32), np.float32)))
        if not isinstance(out, DeviceTensor):
            raise AssertionError("the chain's result left the GPU")
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)
        return float(np.max(np.abs(out.numpy() - expected)))
    check("chain", "rms_norm -> q8_0 gate/up -> gelu_tanh_mul -> float32 down -> gated_residual", run)


def other_thread_check():
    """An op called from a thread other than the one that opened the GPU (as inference threads are)."""
    import threading
    from embodied_ros.kernels.cuda.runtime import gpu
    gpu()  # opened (its context made current) in this thread
    x, w = normal(2, 7), normal(7)
    results = []
    worker = threading.Thread(target=lambda: results.append(registry.implementations("rms_norm")["cuda"](x, w, 1e-6)))

    def run():
        worker.start()
        worker.join()
        if not results:
            raise AssertionError("the op failed in the second thread (its traceback is on stderr)")
        return compare("rms_norm", results[0], (x, w, 1e-6))
    check("rms_norm", "called from another thread", run)


DEVICE_CASES = {"2x7", "3-d, F=17", "3-d 2x3x41", "3-d, F=5", "3x50, wide range", "grid 1x2x2, 2 heads, d 16",
                "3x50", "additive mask", "masked cache rows", "gelu_tanh with biases",
                "q4_k, one vector", "q8_0, 9 rows (two passes)", "leading dims, float16 weight", "q4_k 3-d",
                "transposed input view, float16 weight"}


def main(shard: int = 0, shards: int = 1) -> None:
    """The cases whose index is `shard` modulo `shards` (the simulator is bound to one core: the test
    runs the shards in processes side by side); shard 0 also the chain and the second thread."""
    for index, (op, name, args) in enumerate(cases()):
        if index % shards != shard:
            continue
        check(op, name, host_run(op, name, args))
        if name in DEVICE_CASES:
            check(op, f"{name} (device tensors)", device_run(op, args))
    if shard == 0:
        chain_check()
        other_thread_check()
