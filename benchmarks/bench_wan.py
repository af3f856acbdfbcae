"""One full-size Wan2.2-TI2V-5B transformer block: weight memory per stored type, latency per block
for float32 / Q8_0 / Q4_K weights in this runtime, output error of the quantized blocks, and the
PyTorch reference (diffusers' WanTransformerBlock) measured in the same run.

    python benchmarks/bench_wan.py [--tokens 960] [--text-tokens 512] [--repeats 3]
                                   [--torch-python /tmp/ref_venv/bin/python | --no-torch]
                                   [--workdir /tmp/bench_wan] [--no-write]

Shape: dim 3072 = 24 heads x 128, FFN 14336; 960 latent tokens = LingBot-VA's RoboTwin setting of 3
cameras at 256x320 -> Wan2.2 VAE (16x spatial) -> 16x20 latent cells -> patch (1, 2, 2) -> 8x10
tokens per camera and latent frame, cameras side by side, a chunk of 4 latent frames: grid
(f, h, w) = (4, 8, 30). Text: 512 tokens of width 3072 (Wan pads umT5 output to 512). The time
embedding is per token (the TI2V-5B form). Every call includes the context's cross-attention K/V,
as diffusers' block computes them (the runtime itself caches them per observation).

Each stored type goes through the real path: random float32 weights -> a blocks-only bundle
written with that type (BundleWriter, the runtime's own Q4_K encoder) -> opened memory-mapped ->
`ks.linear` on its tensors. Memory is the bytes of the block's tensors in the bundle. Runs of the
three types are interleaved (F32, Q8_0, Q4_K, F32, ...) so that the ratios see the same machine
load; the reference runs in a subprocess right after (`torch_reference.py wan_block`).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DIM, HEADS, FFN = 3072, 24, 14336
GRID = (4, 8, 30)  # LingBot-VA RoboTwin frame chunk, see the docstring
TYPES = ("f32", "q8_0", "q4_k")
BF16_PLAN = "self_attn=bf16,cross_attn=bf16,ffn=bf16"  # memory only: BF16 is upcast to float32 at load


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=960, help="latent tokens (default 960, grid 4x8x30)")
    parser.add_argument("--text-tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per type (median reported)")
    parser.add_argument("--torch-python", help=f"interpreter of the PyTorch reference environment "
                                               f"(default ${common.REFERENCE_PYTHON_ENV} or {common.DEFAULT_REFERENCE_PYTHON})")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch reference")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_wan"), help="where the bundles are written")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    if min(args.tokens, args.text_tokens, args.repeats) < 1:
        parser.error("--tokens, --text-tokens and --repeats must be >= 1")
    return args


def grid_for(tokens: int) -> tuple[int, int, int]:
    if tokens == 960:
        return GRID
    rows = max(d for d in range(1, int(tokens ** 0.5) + 1) if tokens % d == 0)
    return 1, rows, tokens // rows


def random_block_tensors(np, rng) -> dict:
    """Bundle-named float32 tensors of one block, drawn like the reference records' weights."""
    from embodied_ros.backbone import wan_block as wb
    cfg = wb.WanBlockConfig(DIM, HEADS, FFN)
    tensors = {}
    for name, shape in wb.block_tensor_shapes(cfg).items():
        if wb.is_weight_matrix(name):
            tensors[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(shape[1] ** -0.5)
        elif name == "modulation":
            tensors[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(DIM ** -0.5)
        elif "norm.weight" in name:
            tensors[name] = 1 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            tensors[name] = 0.02 * rng.standard_normal(shape, dtype=np.float32)
    return {f"blk.0.{name}": t for name, t in tensors.items()}


def write_bundle(tensors: dict, plan: str, path: Path) -> tuple[Path, float]:
    from embodied_ros.bundle import BundleWriter
    from embodied_ros.models.lingbot_va.convert import BLOCKS_ONLY, family_plan
    from embodied_ros.models.lingbot_va.naming import weight_group
    start = time.perf_counter()
    writer = BundleWriter("lingbot_va", family_plan(plan), group_of=weight_group)
    writer.set_config({BLOCKS_ONLY: {"dim": DIM, "num_heads": HEADS, "ffn_dim": FFN, "eps": 1e-6,
                                     "rope_theta": 10000.0, "num_layers": 1}})
    writer.add_weights(tensors)
    writer.write(path)
    return path, time.perf_counter() - start


def main(argv=None) -> int:
    args = parse_args(argv)
    import numpy as np
    from embodied_ros.backbone import wan_block as wb
    from embodied_ros.bundle import open_bundle
    from embodied_ros.kernels import KernelSet
    from embodied_ros.kernels.rope3d import rope3d_tables
    from embodied_ros.models.lingbot_va.parity import bundle_blocks

    machine = common.machine_description()
    print(f"machine: {common.machine_line(machine)}")
    rng = np.random.default_rng(0)
    tensors = random_block_tensors(np, rng)
    args.workdir.mkdir(parents=True, exist_ok=True)

    memory, blocks, encode_s = {}, {}, {}
    for qtype, plan in (("f32", "f32"), ("bf16", BF16_PLAN), ("q8_0", "q8_0"), ("q4_k", "q4_k")):
        path, encode_s[qtype] = write_bundle(tensors, plan, args.workdir / f"block_{qtype}.gguf")
        bundle = open_bundle(path, verify_digest=False)
        memory[qtype] = sum(bundle.tensor_info(n).nbytes for n in bundle.weight_names) / 2**20
        stored = sorted({bundle.tensor_info(n).qtype for n in bundle.weight_names})
        print(f"{qtype:5s} block weights {memory[qtype]:8.2f} MiB (stored types {stored}), written in "
              f"{encode_s[qtype]:.1f} s")
        if qtype in TYPES:
            blocks[qtype] = bundle_blocks(bundle)[1][0]
    cfg = wb.WanBlockConfig(DIM, HEADS, FFN)

    grid = grid_for(args.tokens)
    x = rng.standard_normal((args.tokens, DIM), dtype=np.float32)
    context = rng.standard_normal((args.text_tokens, DIM), dtype=np.float32)
    temb = 0.5 * rng.standard_normal((args.tokens, 6, DIM), dtype=np.float32)
    rope = wb.Rope(*rope3d_tables(grid, cfg.head_dim))
    ks = KernelSet("numba")
    ks.compile()

    def run(qtype: str):
        weights = blocks[qtype]
        return wb.wan_block(ks, cfg, weights, x, temb, rope, wb.context_kv(ks, cfg, weights.cross_attn, context))[0]

    outputs = {qtype: run(qtype) for qtype in TYPES}  # warm-up, and the outputs compared below
    runs = {qtype: [] for qtype in TYPES}
    for _ in range(args.repeats):
        for qtype in TYPES:
            start = time.perf_counter()
            run(qtype)
            runs[qtype].append((time.perf_counter() - start) * 1e3)
    reference = outputs["f32"]
    errors = {q: float(np.sqrt(np.mean((outputs[q] - reference) ** 2) / np.mean(reference ** 2))) for q in TYPES}
    flops = common.flops_wan_block(args.tokens, args.text_tokens, DIM, FFN)

    torch_result, torch_note = None, ""
    if not args.no_torch:
        if args.torch_python:
            os.environ[common.REFERENCE_PYTHON_ENV] = args.torch_python
        try:
            torch_result = common.run_torch_reference("wan_block", tokens=args.tokens, text_tokens=args.text_tokens,
                                                      repeats=args.repeats, warmup=1, dtype="both", threads=2)
        except common.ReferenceUnavailable as error:
            torch_note = f"PyTorch reference not measured: {error}"
            print(torch_note)

    rows = []
    f32_ms = common.Timing(runs["f32"]).median_ms
    for qtype in TYPES:
        timing = common.Timing(runs[qtype])
        rows.append({"implementation": "embodied_ros (numba + BLAS)", "weights": qtype.upper(),
                     "weights MiB": round(memory[qtype], 2), "median ms": round(timing.median_ms, 1),
                     "vs own F32": round(timing.median_ms / f32_ms, 3),
                     "GFLOP/s": round(common.gflops_per_s(flops, timing.median_ms), 1),
                     "rel. RMS error vs F32": f"{errors[qtype]:.2e}" if qtype != "f32" else "0 (reference)",
                     "runs ms": ", ".join(f"{t:.0f}" for t in timing.runs_ms)})
    rows.insert(1, {"implementation": "(stored only)", "weights": "BF16", "weights MiB": round(memory["bf16"], 2)})
    for m in (torch_result or {}).get("measurements", []):
        rows.append({"implementation": "PyTorch diffusers WanTransformerBlock", "weights": m["dtype"].upper(),
                     "weights MiB": torch_result.get("weights_mb") if m["dtype"] == "f32" else None,
                     "median ms": round(m["median_ms"], 1), "vs own F32": round(m["median_ms"] / f32_ms, 3),
                     "GFLOP/s": m["gflops_per_s"], "runs ms": ", ".join(f"{t:.0f}" for t in m["runs_ms"])})
    table = common.markdown_table(rows, ["implementation", "weights", "weights MiB", "median ms", "vs own F32",
                                         "GFLOP/s", "rel. RMS error vs F32", "runs ms"])
    print(table)
    body = "\n".join([
        f"One Wan2.2-TI2V-5B block (dim {DIM} = {HEADS} x {DIM // HEADS}, FFN {FFN}), {args.tokens} latent tokens "
        f"(grid f,h,w = {grid}: LingBot-VA RoboTwin, 3 cameras 256x320 -> 8x10 tokens each per latent frame, "
        f"4 latent frames), {args.text_tokens} text tokens, per-token time embedding, batch 1; "
        f"{flops / 1e9:.1f} GFLOP per call (context K/V included). Weights random; each type read from a "
        f"blocks-only bundle written with it (matrices in that type; biases, norms and the modulation table "
        f"F32). Runs of the three types interleaved, {args.repeats} each after a warm-up; PyTorch (2 threads) "
        f"measured in the same run, right after.", "", table, "",
        f"Q4_K block: {memory['q4_k']:.2f} MiB (budget 88.1 MiB; BF16 {memory['bf16']:.2f} MiB). "
        f"Q4_K / F32 latency ratio {common.Timing(runs['q4_k']).median_ms / f32_ms:.3f}; "
        f"Q8_0 / F32 {common.Timing(runs['q8_0']).median_ms / f32_ms:.3f}. "
        f"Output relative RMS error vs the F32 block: Q8_0 {errors['q8_0']:.2e}, Q4_K {errors['q4_k']:.2e}.",
        *([torch_note] if torch_note else [])])
    if not args.no_write:
        common.write_section(common.BENCHMARKS_MD, "wan_block", body, command=common.command_line(),
                             machine=common.machine_line(machine))
        print(f"wrote section wan_block of {common.BENCHMARKS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
