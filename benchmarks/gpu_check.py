"""Check the cuda kernels on a real GPU: every cuda op against its numpy reference at full pi0.5 and Wan
sizes (and SmolVLA and GR00T N1.7 sizes for the ops only they call), with timings. Installs nothing;
needs an NVIDIA GPU, pycuda, and a CUDA toolkit for numba to compile with (see docs/cuda.md).

    python benchmarks/gpu_check.py [--repeats 20] [--only NAME] [--out results.json] [--tiny]

Prints one JSON document: the device, the time it took to open it and compile and load every kernel
(compile_s; a warm PTX cache makes it short), and per case the max
absolute error against the reference (host arguments and device-resident arguments), whether it is
within the op's registered tolerance, and times in milliseconds:
  device_ms     time per call with every argument already on the GPU (CUDA events around --repeats
                calls; where kernels are shorter than a call's Python and launch overhead, this is
                that overhead: the cost of the op inside an on-device chain)
  host_ms       the same call with numpy arguments: uploads, kernels and the download (median of
                --host-repeats)
  reference_ms  the numpy reference on this machine's CPU (one run)
The tensor-core products (kernels/gemm.cu, cases named "tensor-core ...") are checked the same way
at the prefix and Wan sizes and an odd one, with each weight type: kernel_err against the product
of the bf16-rounded inputs, precision_err against float32 (both scaled by |x| @ |W|^T), whether
`linear` in bf16 precision gives the same result, device_ms, tflops, and float32_ms (the same
`linear` call in float32 precision).
Exit status 0 when every case passes. `--tiny` runs the same cases at small sizes (how the tests run
this script in numba's CUDA simulator).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from embodied_ros.kernels import registry  # noqa: E402
from embodied_ros.kernels.attention import MASKED  # noqa: E402
from embodied_ros.kernels.quant import QuantTensor, random_quant_tensor  # noqa: E402
from embodied_ros.kernels.rope import rope_tables  # noqa: E402
from embodied_ros.kernels.rope3d import rope3d_tables  # noqa: E402

# pi0.5: PaliGemma (Gemma 2B) prefix of 968 tokens, SigLIP So400m over 256 patches, action expert
# (Gemma 300M) over 50 action tokens; 8 query heads share 1 K/V head of width 256.
FULL = dict(prefix=968, gemma=2048, gemma_mlp=16384, expert=1024, expert_mlp=4096, heads=8, head_dim=256,
            actions=50, siglip=1152, patches=256, siglip_heads=16, siglip_mlp=4304,
            # Wan 14B-style block: width 3072, 24 heads of 128, MLP 14336, a 4x16x16 latent grid
            wan=3072, wan_heads=24, wan_mlp=14336, wan_grid=(4, 16, 16),
            gemm_prefix=968, gemm_wan_tokens=960,
            # SmolVLA: SmolLM2 layers 960 wide (MLP 2560) over 3 images x 64 + 48 text + 1 state tokens,
            # an expert 720 wide; GR00T N1.7: Qwen3-VL's patch merger, 2x2 patches of 1024 (4096), over
            # the 64 tokens of a 256 px image
            smolvla_prefix=241, smolvla_mlp=2560, smolvla_expert=720, groot_merged=64, groot_merger=4096,
            bitvla_tokens=620, bitvla=2560, bitvla_mlp=6912)  # BitVLA: the BitNet 2B LM over 620 positions
TINY = dict(prefix=9, gemma=256, gemma_mlp=4, expert=256, expert_mlp=3, heads=2, head_dim=8,
            actions=2, siglip=24, patches=3, siglip_heads=2, siglip_mlp=16,
            wan=32, wan_heads=2, wan_mlp=24, wan_grid=(1, 2, 2),
            gemm_prefix=129, gemm_wan_tokens=130,  # tensor-core cases: at least 128 rows
            smolvla_prefix=5, smolvla_mlp=7, smolvla_expert=6, groot_merged=3, groot_merger=10,
            bitvla_tokens=4, bitvla=40, bitvla_mlp=12)


@dataclass(frozen=True)
class Case:
    name: str
    op: str
    make: Callable[[np.random.Generator], tuple]


def _normal(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _prefix_bias(tokens: int) -> np.ndarray:
    """Bidirectional mask over the valid tokens, the last 10% padding (masked for every query)."""
    bias = np.zeros((tokens, tokens), np.float32)
    bias[:, tokens - max(1, tokens // 10):] = MASKED
    return bias


def cases(d: dict) -> list[Case]:
    heads, hd, n, a = d["heads"], d["head_dim"], d["prefix"], d["actions"]
    siglip_hd = d["siglip"] // d["siglip_heads"]
    cos, sin = rope_tables(np.arange(n), hd, 10000.0)
    wan_tokens = int(np.prod(d["wan_grid"]))
    wan_hd = d["wan"] // d["wan_heads"]
    wan_cos, wan_sin = rope3d_tables(d["wan_grid"], wan_hd)
    q4 = lambda r, shape: random_quant_tensor(r, "q4_k", shape)  # noqa: E731
    q8 = lambda r, shape: random_quant_tensor(r, "q8_0", shape)  # noqa: E731
    return [
        Case(f"gemma rms_norm [{n}, {d['gemma']}]", "rms_norm",
             lambda r: (_normal(r, n, d["gemma"], scale=3), _normal(r, d["gemma"], scale=0.1), 1e-6)),
        Case(f"expert ada_rms_norm [{a}, {d['expert']}]", "ada_rms_norm",
             lambda r: (_normal(r, a, d["expert"]), _normal(r, d["expert"]), _normal(r, d["expert"]), 1e-6)),
        Case(f"siglip layer_norm [{d['patches']}, {d['siglip']}]", "layer_norm",
             lambda r: (_normal(r, d["patches"], d["siglip"]) + 1, 1 + _normal(r, d["siglip"], scale=0.1),
                        _normal(r, d["siglip"], scale=0.1), 1e-6)),
        Case(f"gemma rope q [{n}, {heads}, {hd}]", "rope", lambda r: (_normal(r, n, heads, hd), cos, sin)),
        Case(f"siglip gelu_tanh [{d['patches']}, {d['siglip_mlp']}]", "gelu_tanh",
             lambda r: (_normal(r, d["patches"], d["siglip_mlp"], scale=3),)),
        Case(f"siglip feed_forward gelu_tanh [{d['patches']} x {d['siglip']} -> {d['siglip_mlp']} -> {d['siglip']}]",
             "feed_forward", lambda r: (_normal(r, d["patches"], d["siglip"]),
                                        _normal(r, d["siglip_mlp"], d["siglip"], scale=0.03), _normal(r, d["siglip_mlp"]),
                                        _normal(r, d["siglip"], d["siglip_mlp"], scale=0.015), _normal(r, d["siglip"]),
                                        "gelu_tanh")),
        Case(f"gemma gelu_tanh_glu [{n}, 2 x {d['gemma_mlp']}]", "gelu_tanh_glu",
             lambda r: (_normal(r, n, 2 * d["gemma_mlp"], scale=3),)),
        Case(f"expert gelu_tanh_mul [{a}, {d['expert_mlp']}]", "gelu_tanh_mul",
             lambda r: (_normal(r, a, d["expert_mlp"], scale=3), _normal(r, a, d["expert_mlp"]))),
        Case(f"gemma prefix attention [{n} tokens, {heads}/1 heads, d {hd}, masked padding]", "attention",
             lambda r: (_normal(r, n, heads, hd), _normal(r, n, 1, hd), _normal(r, n, 1, hd), _prefix_bias(n))),
        Case(f"siglip attention [{d['patches']} tokens, {d['siglip_heads']} heads, d {siglip_hd}]", "attention",
             lambda r: tuple(_normal(r, d["patches"], d["siglip_heads"], siglip_hd) for _ in range(3))),
        Case(f"expert cached_attention [{a} queries over {n} cached + {a} new keys]", "cached_attention",
             lambda r: (_normal(r, a, heads, hd), _normal(r, n, 1, hd), _normal(r, n, 1, hd), _prefix_bias(n)[0],
                        _normal(r, a, 1, hd), _normal(r, a, 1, hd))),
        Case(f"gemma q projection float32 [{n} x {d['gemma']} -> {heads * hd}]", "linear",
             lambda r: (_normal(r, n, d["gemma"]), _normal(r, heads * hd, d["gemma"], scale=0.02),
                        _normal(r, heads * hd))),
        Case(f"expert linear q8_0 [{a} x {d['expert']} -> {d['expert_mlp']}]", "linear",
             lambda r: (_normal(r, a, d["expert"]), q8(r, (d["expert_mlp"], d["expert"])), None)),
        Case(f"expert linear q4_k [{a} x {d['expert']} -> {d['expert_mlp']}]", "linear",
             lambda r: (_normal(r, a, d["expert"]), q4(r, (d["expert_mlp"], d["expert"])), None)),
        Case(f"gemma linear q4_k [{n} x {d['gemma']} -> {d['gemma_mlp']}]", "linear",
             lambda r: (_normal(r, n, d["gemma"]), q4(r, (d["gemma_mlp"], d["gemma"])), None)),
        Case(f"gemma linear q8_0 matrix-vector [1 x {d['gemma']} -> {d['gemma_mlp']}]", "linear",
             lambda r: (_normal(r, 1, d["gemma"]), q8(r, (d["gemma_mlp"], d["gemma"])), None)),
        Case(f"expert linear float32 down, transposed input [{a} x {d['expert_mlp']} -> {d['expert']}] + bias",
             "linear", lambda r: (_normal(r, d["expert_mlp"], a).T,  # a non-contiguous view
                                  _normal(r, d["expert"], d["expert_mlp"], scale=0.02), _normal(r, d["expert"]))),
        Case(f"dequantize q4_k [{d['gemma_mlp']}, {d['gemma']}]", "dequantize",
             lambda r: (q4(r, (d["gemma_mlp"], d["gemma"])),)),
        Case(f"wan modulated_layer_norm [{wan_tokens}, {d['wan']}]", "modulated_layer_norm",
             lambda r: (_normal(r, wan_tokens, d["wan"], scale=3), _normal(r, 1, d["wan"]),
                        _normal(r, 1, d["wan"], scale=0.5), 1e-6)),
        Case(f"wan rms_norm_across_heads [{wan_tokens}, {d['wan']}]", "rms_norm_across_heads",
             lambda r: (_normal(r, wan_tokens, d["wan"]), 1 + _normal(r, d["wan"], scale=0.2), 1e-6)),
        Case(f"wan rope_pairs [{wan_tokens}, {d['wan_heads']}, {wan_hd}]", "rope_pairs",
             lambda r: (_normal(r, wan_tokens, d["wan_heads"], wan_hd), wan_cos, wan_sin)),
        Case(f"wan self-attention [{wan_tokens} tokens, {d['wan_heads']} heads, d {wan_hd}]", "attention",
             lambda r: tuple(_normal(r, wan_tokens, d["wan_heads"], wan_hd) for _ in range(3))),
        Case(f"wan gated_residual [{wan_tokens}, {d['wan']}]", "gated_residual",
             lambda r: (_normal(r, wan_tokens, d["wan"]), _normal(r, wan_tokens, d["wan"]),
                        _normal(r, wan_tokens, d["wan"]))),
        Case(f"wan linear q8_0 [{wan_tokens} x {d['wan']} -> {d['wan']}]", "linear",
             lambda r: (_normal(r, wan_tokens, d["wan"]), q8(r, (d["wan"], d["wan"])), None)),
        Case(f"wan gelu_tanh [{wan_tokens}, {d['wan_mlp']}]", "gelu_tanh",
             lambda r: (_normal(r, wan_tokens, d["wan_mlp"], scale=3),)),
        Case(f"smolvla lm silu_glu [{d['smolvla_prefix']}, 2 x {d['smolvla_mlp']}]", "silu_glu",
             lambda r: (_normal(r, d["smolvla_prefix"], 2 * d["smolvla_mlp"], scale=3),)),
        Case(f"smolvla expert silu [{a}, {d['smolvla_expert']}]", "silu",
             lambda r: (_normal(r, a, d["smolvla_expert"], scale=3),)),
        Case(f"groot merger gelu_erf [{d['groot_merged']}, {d['groot_merger']}]", "gelu_erf",
             lambda r: (_normal(r, d["groot_merged"], d["groot_merger"], scale=3),)),
        Case(f"bitvla linear_ternary [{d['bitvla_tokens']} x {d['bitvla']} -> {d['bitvla_mlp']}]", "linear_ternary",
             lambda r: (_normal(r, d["bitvla_tokens"], d["bitvla"]), _ternary(r, d["bitvla_mlp"], d["bitvla"]),
                        None)),
    ]


def _ternary(rng: np.random.Generator, n_out: int, n_in: int):
    from embodied_ros.kernels.cpu.ternary_gemm import pack_ternary, ternarize

    return pack_ternary(*ternarize(rng.standard_normal((n_out, n_in), dtype=np.float32)))


def _to_device_args(args: tuple) -> tuple:
    from embodied_ros.kernels.cuda.runtime import to_device
    return tuple(to_device(x) if isinstance(x, (np.ndarray, QuantTensor)) else x for x in args)


# A product's float32 sum of K terms, in another order than numpy's: per output, the difference is
# within a few K * 2^-24 of |x| @ |W|^T (+ |bias|); one misplaced element would be ~1/sqrt(K) of it.
LINEAR_ACCUMULATION_BOUND = 2.0 ** -16


def _accumulation_error(got: np.ndarray, expected: np.ndarray, args: tuple) -> float:
    x, weight, bias = args
    dense = weight.dequantize() if isinstance(weight, QuantTensor) else np.asarray(weight, np.float32)
    scale = np.abs(np.asarray(x, np.float64)) @ np.abs(dense.astype(np.float64)).T
    if bias is not None:
        scale = scale + np.abs(bias)
    return float(np.max(np.abs(got - expected) / np.maximum(scale, 1e-30)))


def _error(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(got - expected))) if expected.size else 0.0


def run_case(case: Case, repeats: int, host_repeats: int, seed: int) -> dict:
    ref = registry.reference_of(case.op)
    impl = registry.implementations(case.op)["cuda"]
    args = case.make(np.random.default_rng(seed))
    result = {"case": case.name, "op": case.op, "tolerance": {"rtol": ref.rtol, "atol": ref.atol}}
    start = time.perf_counter()
    expected = ref.fn(*[x.copy() if isinstance(x, np.ndarray) else x for x in args])
    result["reference_ms"] = round((time.perf_counter() - start) * 1e3, 3)

    got = impl(*args)  # warm-up, and the result checked below
    host_runs = []
    for _ in range(host_repeats):
        start = time.perf_counter()
        impl(*args)
        host_runs.append((time.perf_counter() - start) * 1e3)
    result["host_ms"] = round(statistics.median(host_runs), 3)

    device_args = _to_device_args(args)
    device_out = impl(*device_args)
    gpu = device_out.device
    first, last = gpu.event(), gpu.event()
    first.record()
    for _ in range(repeats):
        impl(*device_args)
    last.record()
    last.synchronize()
    result["device_ms"] = round(first.time_till(last) / repeats, 4)

    device_got = device_out.numpy()
    result["max_abs_err"] = _error(got, expected)
    result["max_abs_err_device"] = _error(device_got, expected)
    result["scaled_err"] = result["max_abs_err"] / max(float(np.max(np.abs(expected))), 1e-30)
    within = [np.allclose(out, expected, rtol=ref.rtol, atol=ref.atol) for out in (got, device_got)]
    if case.op == "linear" and not all(within):  # a long float32 sum: judged against its rounding bound
        result["accumulation_err"] = max(_accumulation_error(out, expected, args) for out in (got, device_got))
        within = [result["accumulation_err"] <= LINEAR_ACCUMULATION_BOUND]
    result["ok"] = bool(all(within))
    return result


# ---- tensor-core products (kernels/gemm.cu) ------------------------------------------------------

# Against the same product of the bf16-rounded inputs in float64, scaled by |x| @ |W|^T: only the order
# and rounding of the float32 accumulation differ; one misplaced element is off by about 1/sqrt(K).
GEMM_KERNEL_TOLERANCE = 1e-3
# Against the float32 product: the documented bound of bf16 inputs, 2^-8 of |x| @ |W|^T.
GEMM_PRECISION_BOUND = 2.0 ** -8


@dataclass(frozen=True)
class GemmCase:
    name: str
    rows: int
    n_in: int
    n_out: int
    weight: str  # "float32", or "bf16": a bf16 copy of W on the GPU


def gemm_cases(d: dict) -> list[GemmCase]:
    shapes = [("gemma gate/up", d["gemm_prefix"], d["gemma"], d["gemma_mlp"]),
              ("wan mlp", d["gemm_wan_tokens"], d["wan"], d["wan_mlp"]),
              ("odd edges", d["gemm_prefix"] + 3, d["gemma"] + 2, d["wan"] + 1)]
    return [GemmCase(f"tensor-core {label} [{m} x {k} -> {n}] {weight} W", m, k, n, weight)
            for label, m, k, n in shapes for weight in ("float32", "bf16")]


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, rounded to nearest, ties to even."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _device_ms(device, call: Callable, repeats: int) -> float:
    call()
    first, last = device.event(), device.event()
    first.record()
    for _ in range(repeats):
        call()
    last.record()
    last.synchronize()
    return first.time_till(last) / repeats


def run_gemm_case(case: GemmCase, repeats: int, seed: int) -> dict:
    from embodied_ros.kernels.cuda import gemm
    from embodied_ros.kernels.cuda.runtime import gpu, to_device
    rng = np.random.default_rng(seed)
    m, k, n = case.rows, case.n_in, case.n_out
    x, w, b = _normal(rng, m, k), _normal(rng, n, k, scale=0.02), _normal(rng, n)
    device = gpu()
    start = time.perf_counter()
    gemm.require_tensor_cores(device)  # raises, saying why, where they cannot run
    result = {"case": case.name, "op": "linear", "build_s": round(time.perf_counter() - start, 3)}

    w_bits = _bf16_bits(w)
    weight = QuantTensor("bf16", (n, k), w_bits.view(np.uint8).reshape(n, 2 * k)) if case.weight == "bf16" else w
    x_d, weight_d, b_d = to_device(x), to_device(weight), to_device(b)
    y_d = device.empty((m, n), np.float32)
    w_arg = weight_d.data if case.weight == "bf16" else weight_d
    ms = _device_ms(device, lambda: gemm.multiply(device, x_d, w_arg, b_d, y_d), repeats)
    y = y_d.numpy()
    linear = registry.implementations("linear")["cuda"]
    with gemm.use_matmul_precision("bf16"):
        result["linear_uses_it"] = bool(np.array_equal(linear(x_d, weight_d, b_d).numpy(), y))
    with gemm.use_matmul_precision("float32"):
        result["float32_ms"] = round(_device_ms(device, lambda: linear(x_d, weight_d, b_d), repeats), 4)
    result["device_ms"] = round(ms, 4)
    result["tflops"] = round(2 * m * n * k / (ms * 1e-3) / 1e12, 2)

    xb = (_bf16_bits(x).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    wb = (w_bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    kernel_err = np.abs(y - (xb @ wb.T + b)) / (np.abs(xb) @ np.abs(wb).T + np.abs(b))
    exact = x.astype(np.float64) @ w.astype(np.float64).T + b
    precision_err = np.abs(y - exact) / (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T + np.abs(b))
    result["kernel_err"] = float(np.max(kernel_err))
    result["precision_err"] = float(np.max(precision_err))
    result["relative_err"] = float(np.linalg.norm(y - exact) / np.linalg.norm(exact))
    result["tolerance"] = {"kernel_err": GEMM_KERNEL_TOLERANCE, "precision_err": GEMM_PRECISION_BOUND}
    result["ok"] = bool(result["kernel_err"] <= GEMM_KERNEL_TOLERANCE and result["linear_uses_it"]
                        and result["precision_err"] <= GEMM_PRECISION_BOUND + GEMM_KERNEL_TOLERANCE)
    return result


def runtime_op_cases(options) -> dict:
    """The device runtime's operations (gpu_engine_ops.py) on the GPU against their numpy reference."""
    import gpu_engine_ops
    from embodied_ros.gpu import cuda_engine
    start = time.perf_counter()
    engine = cuda_engine()
    section = {"engine": engine.name, "compute_capability": list(engine.compute_capability),
               "open_s": round(time.perf_counter() - start, 3), "cases": []}
    for case in gpu_engine_ops.cases(gpu_engine_ops.TINY if options.tiny else gpu_engine_ops.FULL):
        if options.only in case.name:
            try:
                section["cases"].append(gpu_engine_ops.run_case(case, engine, options.repeats, options.seed))
            except Exception as error:  # noqa: BLE001 - report it and go on with the next case
                section["cases"].append({"case": case.name, "ok": False,
                                         "error": "".join(traceback.format_exception(error))[-2000:]})
    return section


def kernel_set_cases(options) -> dict:
    """The op-level cuda backend (numba kernels, tensor-core products) against the numpy references."""
    from embodied_ros.kernels.cuda.runtime import prepare_gpu
    start = time.perf_counter()
    device = prepare_gpu()
    section = {"device": device.name, "compute_capability": list(device.compute_capability),
               "driver_version": device.driver_version, "compile_s": round(time.perf_counter() - start, 3),
               "cases": []}
    for case in cases(TINY if options.tiny else FULL):
        if options.only not in case.name:
            continue
        try:
            section["cases"].append(run_case(case, options.repeats, options.host_repeats, options.seed))
        except Exception as error:  # noqa: BLE001 - report it and go on with the next case
            section["cases"].append({"case": case.name, "op": case.op, "ok": False,
                                     "error": "".join(traceback.format_exception(error))[-2000:]})
    for case in gemm_cases(TINY if options.tiny else FULL):
        if options.only not in case.name:
            continue
        try:
            section["cases"].append(run_gemm_case(case, options.repeats, options.seed))
        except Exception as error:  # noqa: BLE001 - report it and go on with the next case
            section["cases"].append({"case": case.name, "ok": False,
                                     "error": "".join(traceback.format_exception(error))[-2000:]})
    return section


def whole_chunks(options) -> dict:
    """gpu_chunks.py in a child process (it imports torch and LeRobot), its JSON document."""
    out = (options.out.parent if options.out else Path.cwd()) / "gpu_chunks.json"
    command = [sys.executable, str(Path(__file__).with_name("gpu_chunks.py")), "--size", "tiny" if options.tiny else "full",
               "--out", str(out), *options.chunk_args.split()]
    done = subprocess.run(command, capture_output=True, text=True)
    if out.is_file():
        section = json.loads(out.read_text())
    else:
        section = {"error": f"exit {done.returncode}: {done.stderr[-3000:]}"}
    section["ok"] = done.returncode == 0
    section["stderr_tail"] = done.stderr[-1500:]
    return section


SECTIONS = {"runtime_ops": runtime_op_cases, "kernel_set": kernel_set_cases}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per case with device arguments")
    parser.add_argument("--host-repeats", type=int, default=3, help="timed runs per case with numpy arguments")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this text")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"of {', '.join(SECTIONS)}")
    parser.add_argument("--chunks", action="store_true", help="also run gpu_chunks.py (whole chunks against LeRobot)")
    parser.add_argument("--chunk-args", default="", help="arguments passed on to gpu_chunks.py")
    parser.add_argument("--out", type=Path, help="also write the JSON document here")
    parser.add_argument("--tiny", action="store_true", help="small sizes (for the CUDA simulator)")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    if options.repeats < 1 or options.host_repeats < 1:
        parser.error(f"--repeats and --host-repeats must be at least 1, got {options.repeats}, {options.host_repeats}")

    from embodied_ros.kernels.cuda.runtime import CudaUnavailable
    report = {"sizes": "tiny" if options.tiny else "full"}
    for name in options.sections.split(","):
        try:
            report[name] = SECTIONS[name](options)
        except CudaUnavailable as error:
            print(f"gpu_check: {error}", file=sys.stderr)
            return 2
        except Exception as error:  # noqa: BLE001 - one section's failure is reported, the next still runs
            report[name] = {"error": "".join(traceback.format_exception(error))[-3000:], "cases": [{"ok": False}]}
        if options.out:
            options.out.write_text(json.dumps(report, indent=1) + "\n")
    if options.chunks:
        report["chunks"] = whole_chunks(options)
    report["ok"] = all(section.get("cases") and all(c["ok"] for c in section["cases"])
                       for name, section in report.items() if name in SECTIONS)
    report["ok"] &= report.get("chunks", {}).get("ok", True)
    text = json.dumps(report, indent=1)
    print(text)
    if options.out:
        options.out.write_text(text + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
