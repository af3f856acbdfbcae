"""Full-size pi0.5 layers on the CPU's reduced-precision units, next to PyTorch f32 and bf16.

    python benchmarks/pi05_matrix_units.py [--repeats 3] [--rounds 1] [--threads 2] [--no-write]

One Gemma-2B prefix layer (968 tokens) and one expert layer (50 action tokens over a 968-token
cache), random weights (pi05_layers.py), stored as F32, BF16 and Q8_0, run through the runtime's
layer functions with the products the CPU's features select at start-up (BF16: `vdpbf16ps` where
AVX512-BF16 is present), interleaved; then torch_reference.py runs LeRobot's PiGemma layers in
float32 and bfloat16 in its own process, in the same run. Before the layers, one expert-sized
product (50 x 1024 -> 8192) per path, with numpy's float32 BLAS and, where `ml_dtypes` is
importable, numpy on its bfloat16 type. Writes BENCHMARKS.md section pi05_matrix_units.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import common
import pi05_layers

TYPES = ("f32", "bf16", "q8_0")
LAYERS = ("gemma_layer", "expert_layer")


def product_rows(ks, rng, repeats: int) -> list[dict]:
    """One 50 x 1024 -> 8192 product per path, best of `repeats` after a warm-up."""
    from embodied_ros.bundle.quantize import quantize
    from embodied_ros.kernels.linear import pack_for_products
    x = rng.standard_normal((50, 1024), dtype=np.float32)
    w = rng.standard_normal((8192, 1024), dtype=np.float32) * np.float32(1024 ** -0.5)
    paths = {f"embodied_ros {q.upper()} ({type(pack_for_products(quantize(w, q))).__name__})":
             (lambda weight: lambda: ks.linear(x, weight))(pack_for_products(quantize(w, q))) for q in TYPES}
    w_t = np.ascontiguousarray(w.T)
    paths["numpy float32 matmul (BLAS)"] = lambda: x @ w_t
    try:
        import ml_dtypes
        x_b, w_b = x.astype(ml_dtypes.bfloat16), w_t.astype(ml_dtypes.bfloat16)
        paths[f"numpy bfloat16 matmul (ml_dtypes {ml_dtypes.__version__})"] = lambda: x_b @ w_b
    except ImportError:
        pass
    rows = []
    for name, run in paths.items():
        run()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1e3)
        rows.append({"product 50 x 1024 -> 8192": name, "best ms": min(times), "runs ms": pi05_layers.ms_list(times)})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--section", default="pi05_matrix_units")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[variable] = str(args.threads)  # before numba starts its pool
    from embodied_ros.kernels import KernelSet, reuse_freed_memory
    from embodied_ros.kernels.linear_bf16 import BF16_UNIT
    ks = KernelSet("numba")
    reuse_freed_memory()
    rng = np.random.default_rng(0)
    products = product_rows(ks, rng, args.repeats)
    layers = [pi05_layers.BUILDERS[name](ks, rng, TYPES) for name in LAYERS]
    ours = {(layer.name, q): [] for layer in layers for q in TYPES}
    theirs = {(layer.name, d): [] for layer in layers for d in ("f32", "bf16")}
    for _ in range(args.rounds):
        for layer in layers:
            for qtype in TYPES:
                layer.run(layer.weights[qtype])  # warm-up (and compilation on the first round)
            for _ in range(args.repeats):
                for qtype in TYPES:
                    start = time.perf_counter()
                    layer.run(layer.weights[qtype])
                    ours[layer.name, qtype].append((time.perf_counter() - start) * 1e3)
            if not args.no_torch:
                result = common.run_torch_reference(layer.name, repeats=args.repeats, warmup=1, threads=args.threads,
                                                    dtype="both")
                for measurement in result["measurements"]:
                    theirs[layer.name, measurement["dtype"]].extend(measurement["runs_ms"])
    from unit_peaks import describe, tile_peak_tflops
    peak = tile_peak_tflops(args.threads)
    rows = []
    for layer in layers:
        torch_f32, torch_bf16 = (np.median(theirs[layer.name, d]) if theirs[layer.name, d] else None
                                 for d in ("f32", "bf16"))
        for qtype in TYPES:
            median = float(np.median(ours[layer.name, qtype]))
            rows.append({"layer": layer.name, "implementation": "embodied_ros", "weights": qtype.upper(),
                         "weights MiB": layer.weight_mib[qtype], "median ms": median,
                         "TFLOP/s": layer.flops / median / 1e9,
                         "% of tiles' bf16 peak": 100 * layer.flops / median / 1e9 / peak if peak else None,
                         "vs own F32": float(np.median(ours[layer.name, "f32"])) / median,
                         "PyTorch f32 / this": torch_f32 / median if torch_f32 else None,
                         "PyTorch bf16 / this": torch_bf16 / median if torch_bf16 else None,
                         "runs ms": pi05_layers.ms_list(ours[layer.name, qtype])})
        for dtype, median in (("f32", torch_f32), ("bf16", torch_bf16)):
            if median:
                rows.append({"layer": layer.name, "implementation": "PyTorch (LeRobot PiGemma layer)",
                             "weights": dtype.upper(), "median ms": float(median),
                             "TFLOP/s": layer.flops / median / 1e9,
                             "% of tiles' bf16 peak": 100 * layer.flops / median / 1e9 / peak if peak else None,
                             "runs ms": pi05_layers.ms_list(theirs[layer.name, dtype])})
    body = "\n".join([
        f"CPU features: {common.cpu_features()}. BF16 products on: {BF16_UNIT or 'float32 (no bf16 unit)'}. "
        f"{describe(args.threads)} "
        f"{args.threads} threads, {args.rounds} round(s) of {args.repeats} runs per type, the three stored types "
        "interleaved, then PyTorch f32 and bf16 in its own process (torch_reference.py). The machine is shared "
        "with other work while this runs (load average in the Machine line, on 2 cores): ratios inside one run are "
        "what to read, not absolute times, and PyTorch's OpenMP pool loses more than this runtime's to an "
        "oversubscribed CPU. The ml_dtypes row appears where ml_dtypes is importable (it is not a dependency; here "
        "from a side directory on PYTHONPATH).",
        "", common.markdown_table(products), "",
        common.markdown_table(rows, ["layer", "implementation", "weights", "weights MiB", "median ms",
                                         "TFLOP/s", "% of tiles' bf16 peak", "vs own F32", "PyTorch f32 / this",
                                         "PyTorch bf16 / this", "runs ms"])])
    print(body)
    if not args.no_write:
        common.write_section(common.REPO_ROOT / "BENCHMARKS.md", args.section, body,
                             command="python benchmarks/pi05_matrix_units.py " + " ".join(argv or sys.argv[1:]),
                             machine=common.machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
