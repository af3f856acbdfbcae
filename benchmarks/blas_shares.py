"""BLAS work as shares on the runtime's own threads against OpenBLAS's threads, on CPUs without AVX-512.

    python benchmarks/blas_shares.py [--rounds 5] [--section NAME]

One SigLIP layer of a released-size SmolVLA (3 cameras of 1024 tokens, 768 wide, 12 heads, mlp
3072), random weights as F32 and as BF16 packed the way this CPU multiplies them, runs in one
process in both ways, alternating: its products of 3072 rows and its attention as shares
(kernels/cpu/blas.py: `product`, `run_split`; SHARE_MIN_ROWS = 1024) and on OpenBLAS's threads
(SHARE_MIN_ROWS above the layer's rows: the products then use BLAS's threads, and the attention after
them too). Every thread of the process; each run starts after a pause, so that OpenBLAS's worker,
spinning for about 0.1 s after the other way's last product, has let go of its core; medians of the
rounds compared.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

WIDTH, MLP, HEADS, CAMERAS, TOKENS = 768, 3072, 12, 3, 1024


def _layer(rng: np.random.Generator, pack) -> dict:
    def matrix(n_out, n_in):
        return pack(rng.standard_normal((n_out, n_in), dtype=np.float32) * np.float32(0.03))

    def vector(n):
        return rng.standard_normal(n, dtype=np.float32) * np.float32(0.01)

    return {"ln1.weight": np.ones(WIDTH, np.float32), "ln1.bias": vector(WIDTH),
            "ln2.weight": np.ones(WIDTH, np.float32), "ln2.bias": vector(WIDTH),
            "attn_qkv.weight": matrix(3 * WIDTH, WIDTH), "attn_qkv.bias": vector(3 * WIDTH),
            "attn_out.weight": matrix(WIDTH, WIDTH), "attn_out.bias": vector(WIDTH),
            "fc1.weight": matrix(MLP, WIDTH), "fc1.bias": vector(MLP),
            "fc2.weight": matrix(WIDTH, MLP), "fc2.bias": vector(WIDTH)}


def measure(rounds: int) -> list[dict]:
    import numba

    from embodied_ros.backbone import siglip
    from embodied_ros.backbone.smolvlm import SmolVLMVisionConfig
    from embodied_ros.kernels.cpu import blas
    from embodied_ros.kernels.linear import VECTOR_GEMM, pack_for_products
    from embodied_ros.kernels.quant import QuantTensor
    from embodied_ros.kernels.registry import KernelSet

    if VECTOR_GEMM:
        raise SystemExit("this CPU multiplies on its own 16-lane kernels (AVX-512): no BLAS work to split")
    blas.limit_threads(numba.get_num_threads())
    ks = KernelSet("numba")
    cfg = SmolVLMVisionConfig(image_size=512, patch_size=16, width=WIDTH, depth=1, mlp_dim=MLP, num_heads=HEADS,
                              scale_factor=4)
    rng = np.random.default_rng(0)

    def bf16(values):
        bits = (values.view(np.uint32) >> 16).astype(np.uint16)
        return pack_for_products(QuantTensor("bf16", values.shape, bits.view(np.uint8).reshape(values.shape[0], -1)))

    x = rng.standard_normal((CAMERAS * TOKENS, WIDTH), dtype=np.float32)
    ways = {"shares": blas.SHARE_MIN_ROWS, "OpenBLAS threads": CAMERAS * TOKENS + 1}
    rows = []
    for weights, pack in (("F32", lambda m: m), ("BF16", bf16)):
        layer = _layer(rng, pack)
        times = {way: [] for way in ways}
        for _ in range(rounds + 1):
            for way, bound in ways.items():
                blas.SHARE_MIN_ROWS = bound
                time.sleep(0.2)  # OpenBLAS's worker, spinning after the other way's last product, lets go
                start = time.perf_counter()
                siglip.encoder_layer(ks, cfg, layer, x, CAMERAS)
                times[way].append(1e3 * (time.perf_counter() - start))
        blas.SHARE_MIN_ROWS = ways["shares"]
        medians = {way: float(np.median(values[1:])) for way, values in times.items()}
        rows.append({"weights": f"{weights} ({type(layer['fc1.weight']).__name__})",
                     "shares ms": medians["shares"], "OpenBLAS threads ms": medians["OpenBLAS threads"],
                     "OpenBLAS threads / shares": medians["OpenBLAS threads"] / medians["shares"],
                     "shares runs ms": ", ".join(f"{v:.0f}" for v in times["shares"][1:]),
                     "OpenBLAS threads runs ms": ", ".join(f"{v:.0f}" for v in times["OpenBLAS threads"][1:])})
    return rows


def main(argv=None) -> int:
    import common
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each way per weight type (default 5)")
    parser.add_argument("--section", default=None, help="write the table as this BENCHMARKS.md section")
    args = parser.parse_args(argv)
    import numba
    body = (f"One SigLIP layer of released-size SmolVLA ({CAMERAS} cameras x {TOKENS} tokens, {WIDTH} wide, {HEADS} "
            f"heads, mlp {MLP}), {numba.get_num_threads()} threads, {args.rounds} rounds of the two ways alternating "
            "after an untimed one; medians.\n\n" + common.markdown_table(measure(args.rounds)))
    print(body)
    if args.section:
        common.write_section(Path(__file__).resolve().parent.parent / "BENCHMARKS.md", args.section, body,
                             command=f"python benchmarks/blas_shares.py --rounds {args.rounds} --section {args.section}",
                             machine=common.machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
