"""The device runtime's operations (embodied_ros/gpu/engine.py) on the GPU against their numpy
reference (gpu/host.py), at the shapes full-size pi0.5 and SmolVLA run them; run by gpu_check.py.

Each case draws its inputs, runs the operation on both engines from the same inputs, and compares
every output: the largest difference over the largest reference value. Both engines round the same
float32 values to bf16, so the differences are float32 accumulation order, the GPU's fast math
functions and, where those land a value on a rounding boundary, one bf16 step (2^-8 relative): bf16
outputs pass within 8e-3, float32 outputs within 1e-4 (probabilities: 4e-3 absolute).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from embodied_ros.gpu.host import HostEngine
from embodied_ros.gpu.layers import heads_view
from embodied_ros.kernels.attention import MASKED
from embodied_ros.kernels.cpu.bf16_gemm import bf16_bits

BF16_TOLERANCE, F32_TOLERANCE = 8e-3, 1e-4

FULL = dict(prefix=968, gemma=2048, gemma_mlp=16384, heads=8, head_dim=256, expert=1024, actions=50, cache=968,
            siglip_tokens=256, siglip=1152, siglip_heads=16, siglip_mlp=4304, smol_prefix=241, smol=960,
            smol_heads=15, smol_kv=5, smol_head_dim=64, smol_mlp=2560, action_dim=32)
TINY = dict(prefix=19, gemma=64, gemma_mlp=96, heads=4, head_dim=16, expert=32, actions=5, cache=19,
            siglip_tokens=9, siglip=48, siglip_heads=4, siglip_mlp=40, smol_prefix=11, smol=30,
            smol_heads=6, smol_kv=2, smol_head_dim=8, smol_mlp=24, action_dim=7)


@dataclass(frozen=True)
class OpCase:
    name: str
    make: Callable[[np.random.Generator], dict]  # host inputs; "out*" entries are outputs (initial values)
    run: Callable  # (engine, arrays) -> None, writing the "out*" arrays


def _bf16(rng, *shape, scale=1.0):
    return bf16_bits((rng.standard_normal(shape) * scale).astype(np.float32)).reshape(shape)


def _f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def cases(d: dict) -> list[OpCase]:
    n, D, F, H, hd = d["prefix"], d["gemma"], d["gemma_mlp"], d["heads"], d["head_dim"]
    c, E, rows = d["actions"], d["expert"], d["cache"] + d["actions"]
    t, W, sh = d["siglip_tokens"], d["siglip"], d["siglip_heads"]
    sn, sW, sH, sK, sd = d["smol_prefix"], d["smol"], d["smol_heads"], d["smol_kv"], d["smol_head_dim"]
    key_mask = np.zeros((1, rows), np.float32)
    key_mask[0, d["cache"] - d["cache"] // 7: d["cache"]] = MASKED
    causal_mask = np.where(np.tril(np.ones((c, rows), bool), k=rows - c), np.float32(0), MASKED)
    return [
        OpCase(f"matmul gemma gate/up [{n} x {D} -> {2 * F}] bf16 out",
               lambda r: {"a": _bf16(r, n, D), "b": _bf16(r, 2 * F, D, scale=D ** -0.5),
                          "out": np.zeros((n, 2 * F), np.uint16)},
               lambda e, x: e.matmul(x["a"], x["b"], x["out"])),
        OpCase(f"matmul gemma down [{n} x {F} -> {D}] added to float32",
               lambda r: {"a": _bf16(r, n, F), "b": _bf16(r, D, F, scale=F ** -0.5), "out": _f32(r, n, D)},
               lambda e, x: e.matmul(x["a"], x["b"], x["out"], beta=1.0)),
        OpCase(f"matmul expert action_out float32 [{c} x {E} -> {d['action_dim']}] alpha -0.1 added",
               lambda r: {"a": _f32(r, c, E), "b": _f32(r, d["action_dim"], E, scale=E ** -0.5),
                          "out": _f32(r, c, d["action_dim"])},
               lambda e, x: e.matmul(x["a"], x["b"], x["out"], alpha=-0.1, beta=1.0)),
        OpCase(f"attention scores, {H} heads sharing one K [{n} x {hd}] (batch stride 0)",
               lambda r: {"q": _bf16(r, n, H * hd), "k": _bf16(r, n, 3 * hd), "out": np.zeros((H, n, n), np.float32)},
               lambda e, x: e.matmul(heads_view(e, x["q"], H, hd), heads_view(e, x["k"][:, hd:2 * hd], H, hd, 0, True),
                                     x["out"])),
        OpCase(f"attention values, {H} heads [{n} x {n}] @ [{n} x {hd}] into [{n}, {H} x {hd}]",
               lambda r: {"p": _bf16(r, H, n, n, scale=1.0 / n), "v": _bf16(r, n, hd),
                          "out": np.zeros((n, H * hd), np.uint16)},
               lambda e, x: e.matmul(x["p"], heads_view(e, x["v"], H, hd, 0, True), heads_view(e, x["out"], H, hd),
                                     transpose_b=False)),
        OpCase(f"siglip per-image scores, {sh} heads read from q/k/v rows [{t}, 3 x {W}]",
               lambda r: {"qkv": _bf16(r, t, 3 * W), "out": np.zeros((sh, t, t), np.float32)},
               lambda e, x: e.matmul(heads_view(e, x["qkv"], sh, W // sh), heads_view(e, x["qkv"], sh, W // sh, sh),
                                     x["out"])),
        OpCase(f"residual_norm gemma [{n}, {D}]",
               lambda r: {"x": _f32(r, n, D, scale=3), "mul": 1 + _f32(r, D, scale=0.1),
                          "out": np.zeros((n, D), np.uint16)},
               lambda e, x: e.residual_norm(x["x"], x["out"], x["mul"], 1e-6)),
        OpCase(f"residual_norm expert: gated update, adaptive norm [{c}, {E}]",
               lambda r: {"out_x": _f32(r, c, E), "y": _f32(r, c, E), "gate": _f32(r, E), "mul": 1 + _f32(r, E),
                          "add": _f32(r, E), "out": np.zeros((c, E), np.uint16)},
               lambda e, x: e.residual_norm(x["out_x"], x["out"], x["mul"], 1e-6, y=x["y"], gate=x["gate"],
                                            add=x["add"])),
        OpCase(f"residual_norm siglip layer norm with the last bias, float32 out [{3 * t}, {W}]",
               lambda r: {"out_x": _f32(r, 3 * t, W) + 1, "bias": _f32(r, W), "mul": 1 + _f32(r, W, scale=0.1),
                          "add": _f32(r, W, scale=0.1), "out": np.zeros((3 * t, W), np.float32)},
               lambda e, x: e.residual_norm(x["out_x"], x["out"], x["mul"], 1e-6, bias=x["bias"], add=x["add"],
                                            center=True)),
        OpCase(f"rope_split gemma q/k/v [{n}, ({H} + 2) x {hd}] into cache rows",
               lambda r: dict(zip(("cos", "sin"), _tables(r, n, hd))) | {
                   "src": _f32(r, n, (H + 2) * hd), "out_q": np.zeros((n, H * hd), np.uint16),
                   "out_k": np.zeros((n + 7, hd), np.uint16), "out_v": np.zeros((n + 7, hd), np.uint16)},
               lambda e, x: e.rope_split(x["src"], x["out_q"], x["out_k"][7:], x["out_v"][7:], (H, 1, 1), hd,
                                         x["cos"], x["sin"])),
        OpCase(f"rope_split smolvla q/k/v [{sn}, ({sH} + 2 x {sK}) x {sd}]",
               lambda r: dict(zip(("cos", "sin"), _tables(r, sn, sd))) | {
                   "src": _f32(r, sn, (sH + 2 * sK) * sd), "out_q": np.zeros((sn, sH * sd), np.uint16),
                   "out_k": np.zeros((sn, sK * sd), np.uint16), "out_v": np.zeros((sn, sK * sd), np.uint16)},
               lambda e, x: e.rope_split(x["src"], x["out_q"], x["out_k"], x["out_v"], (sH, sK, sK), sd, x["cos"],
                                         x["sin"])),
        OpCase(f"softmax gemma prefix [{H} x {n}, {n}]",
               lambda r: {"s": _f32(r, H * n, n, scale=8), "out": np.zeros((H * n, n), np.uint16)},
               lambda e, x: e.softmax(x["s"], x["out"], hd ** -0.5)),
        OpCase(f"softmax expert with key mask [{H} x {c}, {rows}]",
               lambda r: {"s": _f32(r, H * c, rows, scale=8), "mask": key_mask, "out": np.zeros((H * c, rows), np.uint16)},
               lambda e, x: e.softmax(x["s"], x["out"], hd ** -0.5, x["mask"])),
        OpCase(f"softmax smolvla causal actions [{sH} x {c}, {rows}]",
               lambda r: {"s": _f32(r, sH * c, rows, scale=8), "mask": causal_mask.astype(np.float32),
                          "out": np.zeros((sH * c, rows), np.uint16)},
               lambda e, x: e.softmax(x["s"], x["out"], sd ** -0.5, x["mask"])),
        OpCase(f"glu gelu_tanh gemma [{n}, 2 x {F}]",
               lambda r: {"gu": _bf16(r, n, 2 * F, scale=3), "out": np.zeros((n, F), np.uint16)},
               lambda e, x: e.glu(x["gu"], x["out"], "gelu_tanh")),
        OpCase(f"glu silu smolvla [{sn}, 2 x {d['smol_mlp']}]",
               lambda r: {"gu": _bf16(r, sn, 2 * d["smol_mlp"], scale=3), "out": np.zeros((sn, d["smol_mlp"]), np.uint16)},
               lambda e, x: e.glu(x["gu"], x["out"], "silu")),
        OpCase(f"bias_act gelu_tanh siglip [{3 * t}, {d['siglip_mlp']}]",
               lambda r: {"y": _f32(r, 3 * t, d["siglip_mlp"], scale=3), "bias": _f32(r, d["siglip_mlp"]),
                          "out": np.zeros((3 * t, d["siglip_mlp"]), np.uint16)},
               lambda e, x: e.bias_act(x["y"], x["out"], x["bias"], "gelu_tanh")),
        OpCase(f"bias_act silu float32 in place [{c}, {sW}]",
               lambda r: {"out": _f32(r, c, sW, scale=3), "bias": _f32(r, sW)},
               lambda e, x: e.bias_act(x["out"], x["out"], x["bias"], "silu")),
        OpCase(f"axpy_cast Euler bias [{c}, {d['action_dim']}]",
               lambda r: {"out_x": _f32(r, c, d["action_dim"]), "bias": _f32(r, d["action_dim"]),
                          "out": np.zeros((c, d["action_dim"]), np.uint16)},
               lambda e, x: e.axpy_cast(x["out_x"], x["out"], x["bias"], -0.1)),
    ]


def _tables(rng, rows: int, head_dim: int):
    angles = rng.random((rows, head_dim // 2)).astype(np.float32) * 100
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _as_float(array: np.ndarray) -> np.ndarray:
    return (array.astype(np.uint32) << 16).view(np.float32) if array.dtype == np.uint16 else array


def run_case(case: OpCase, engine, repeats: int, seed: int) -> dict:
    """The case once on both engines, compared; then timed on the GPU (CUDA events, `repeats` runs)."""
    inputs = case.make(np.random.default_rng(seed))
    host = {name: value.copy() for name, value in inputs.items()}
    case.run(HostEngine(), host)
    with engine.active():
        arrays = {name: engine.upload(value) for name, value in inputs.items()}
        case.run(engine, arrays)
        outputs = {name: engine.download(arrays[name]) for name in inputs if name.startswith("out")}
    result = {"case": case.name}
    ok = True
    for name, got in outputs.items():
        reference, got = _as_float(host[name]), _as_float(got)
        if case.name.startswith("softmax"):
            error, tolerance = float(np.abs(got - reference).max()), 4e-3
        else:
            error = float(np.abs(got - reference).max()) / (float(np.abs(reference).max()) or 1.0)
            tolerance = BF16_TOLERANCE if host[name].dtype == np.uint16 else F32_TOLERANCE
        result[f"{name}_error"] = error
        ok &= bool(np.isfinite(got).all()) and error <= tolerance
    result["ok"] = bool(ok)
    with engine.active():
        start, stop = engine.cupy.cuda.Event(), engine.cupy.cuda.Event()
        start.record(engine.stream)
        for _ in range(repeats):
            case.run(engine, arrays)
        stop.record(engine.stream)
        stop.synchronize()
    result["device_ms"] = round(engine.cupy.cuda.get_elapsed_time(start, stop) / repeats, 4)
    return result


def run_on_host(case: OpCase, seed: int) -> dict:
    """The case on the exact host engine against the rounding one (the dry run of a machine without a
    GPU): every output written, shapes and views consistent."""
    inputs = case.make(np.random.default_rng(seed))
    rounded = {name: value.copy() for name, value in inputs.items()}
    exact = {name: (_as_float(value).copy() if value.dtype == np.uint16 else value.copy())
             for name, value in inputs.items()}
    case.run(HostEngine(), rounded)
    case.run(HostEngine(exact=True), exact)
    errors = {}
    for name in (n for n in inputs if n.startswith("out")):
        reference = exact[name]
        errors[name] = float(np.abs(_as_float(rounded[name]) - reference).max()) / (float(np.abs(reference).max()) or 1.0)
    return {"case": case.name, "errors": errors, "ok": all(np.isfinite(list(errors.values())))}
