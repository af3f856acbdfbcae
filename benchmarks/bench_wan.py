"""One full-size Wan2.2-TI2V-5B transformer block: weight memory per stored type, latency per block
for float32 / Q8_0 / Q4_K weights in this runtime, output error of the quantized blocks, and the
PyTorch reference (diffusers' WanTransformerBlock) measured in the same run.

    python benchmarks/bench_wan.py [--tokens 960] [--text-tokens 512] [--repeats 5] [--threads 2]
                                   [--torch-python PATH | --no-torch]
                                   [--cached-context] [--workdir DIR] [--rewrite]
                                   [--section wan_block] [--no-write]

Shape: dim 3072 = 24 heads x 128, FFN 14336; 960 latent tokens = LingBot-VA's RoboTwin setting of 3
cameras at 256x320 -> Wan2.2 VAE (16x spatial) -> 16x20 latent cells -> patch (1, 2, 2) -> 8x10
tokens per camera and latent frame, cameras side by side, a chunk of 4 latent frames: grid
(f, h, w) = (4, 8, 30). Text: 512 tokens
of width 3072 (Wan pads umT5 output to 512). The time embedding is per token (the TI2V-5B form).
Every call includes the context's cross-attention K/V, as diffusers' block computes them, unless
--cached-context (the runtime caches them per observation; no PyTorch comparison then).

Each stored type goes through the real path: random float32 weights -> a blocks-only bundle
written with that type (BundleWriter, the runtime's own Q4_K encoder; reused from --workdir on
later runs) -> opened memory-mapped -> `ks.linear` on its tensors. Memory is the bytes of the
block's tensors in the bundle. Runs of the three types are interleaved (F32, Q8_0, Q4_K, F32, ...)
so that they see the same machine load; the reference runs in a subprocess right after
(`torch_reference.py wan_block`, same thread count). Wall time and this process's CPU time are
recorded per run: on a shared machine other processes only add wall time, so ratios use each
type's best run, and with --threads 1 the CPU time is the cost of the work itself.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

TYPES = ("f32", "q8_0", "q4_k")
PLANS = {"f32": "f32", "bf16": "self_attn=bf16,cross_attn=bf16,ffn=bf16", "q8_0": "q8_0", "q4_k": "q4_k"}
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=960, help="latent tokens (default 960: grid 4 x 8 x 30)")
    parser.add_argument("--text-tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per type (best and median reported)")
    parser.add_argument("--threads", type=int, default=2, help="BLAS, numba and torch threads (default 2)")
    parser.add_argument("--torch-python", help=common.reference_python_help())
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch reference")
    parser.add_argument("--cached-context", action="store_true",
                        help="compute the context's cross-attention K/V once, outside the timed calls")
    common.add_workdir_argument(parser, "bench_wan", "where the bundles are written")
    parser.add_argument("--rewrite", action="store_true", help="write the bundles again even if --workdir has them")
    parser.add_argument("--section", default="wan_block", help="BENCHMARKS.md section to write (default wan_block)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    if min(args.tokens, args.text_tokens, args.repeats, args.threads) < 1:
        parser.error("--tokens, --text-tokens, --repeats and --threads must be >= 1")
    return args


FULL_GRID = (4, 8, 30)  # (frames, rows, columns) of tokens: the setting in the docstring


def full_size_block():
    """The Wan2.2-TI2V-5B block."""
    from embodied_ros.backbone.wan_block import WanBlockConfig
    return WanBlockConfig(dim=3072, num_heads=24, ffn_dim=14336, eps=1e-6)


def grid_for(tokens: int) -> tuple[int, int, int]:
    if tokens == FULL_GRID[0] * FULL_GRID[1] * FULL_GRID[2]:
        return FULL_GRID
    rows = max(d for d in range(1, int(tokens ** 0.5) + 1) if tokens % d == 0)
    return 1, rows, tokens // rows


def random_block_tensors() -> dict:
    """Bundle-named float32 tensors of one block, drawn like the reference records' weights."""
    import numpy as np
    from embodied_ros.backbone import wan_block as wb
    cfg, rng = full_size_block(), np.random.default_rng(0)
    tensors = {}
    for name, shape in wb.block_tensor_shapes(cfg).items():
        if wb.is_weight_matrix(name):
            tensors[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(shape[1] ** -0.5)
        elif name == "modulation":
            tensors[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(cfg.dim ** -0.5)
        elif "norm.weight" in name:
            tensors[name] = 1 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            tensors[name] = 0.02 * rng.standard_normal(shape, dtype=np.float32)
    return {f"blk.0.{name}": t for name, t in tensors.items()}


def write_bundle(tensors: dict, plan: str, path: Path) -> float:
    """Write a blocks-only bundle of the full-size block with `plan`; seconds to encode and write."""
    from embodied_ros.bundle import BundleWriter
    from embodied_ros.models.lingbot_va.convert import BLOCKS_ONLY, family_plan
    from embodied_ros.models.lingbot_va.naming import weight_group
    start = time.perf_counter()
    cfg = full_size_block()
    writer = BundleWriter("lingbot_va", family_plan(plan), group_of=weight_group)
    writer.set_config({BLOCKS_ONLY: {"dim": cfg.dim, "num_heads": cfg.num_heads, "ffn_dim": cfg.ffn_dim,
                                     "eps": cfg.eps, "rope_theta": cfg.rope_theta, "num_layers": 1}})
    writer.add_weights(tensors)
    writer.write(path)
    return time.perf_counter() - start


def load_blocks(workdir: Path, rewrite: bool) -> tuple[dict, dict]:
    """(MiB of block weights per stored type, block weights per timed type), via bundles."""
    from embodied_ros.bundle import open_bundle
    from embodied_ros.models.lingbot_va.parity import bundle_blocks
    workdir.mkdir(parents=True, exist_ok=True)
    tensors, memory, blocks = None, {}, {}
    for qtype, plan in PLANS.items():
        path = workdir / f"block_seed0_{qtype}.gguf"
        if rewrite or not path.is_file():  # same seed, same bundle: earlier runs' files are reused
            tensors = tensors or random_block_tensors()
            print(f"{qtype:5s} bundle written in {write_bundle(tensors, plan, path):.1f} s")
        bundle = open_bundle(path)
        memory[qtype] = sum(bundle.tensor_info(n).nbytes for n in bundle.weight_names) / 2**20
        stored = sorted({bundle.tensor_info(n).qtype for n in bundle.weight_names})
        print(f"{qtype:5s} block weights {memory[qtype]:8.2f} MiB (stored types {stored})")
        if qtype in TYPES:
            blocks[qtype] = bundle_blocks(bundle)[1][0]
    return memory, blocks


def time_block(blocks: dict, args) -> tuple[dict, dict, dict]:
    """Interleaved runs: (wall ms per type, CPU ms per type, relative RMS error vs F32 per type)."""
    import numpy as np
    from embodied_ros.backbone import wan_block as wb
    from embodied_ros.kernels import KernelSet
    from embodied_ros.kernels.rope3d import rope3d_tables
    cfg, rng = full_size_block(), np.random.default_rng(1)
    x = rng.standard_normal((args.tokens, cfg.dim), dtype=np.float32)
    context = rng.standard_normal((args.text_tokens, cfg.dim), dtype=np.float32)
    temb = 0.5 * rng.standard_normal((args.tokens, 6, cfg.dim), dtype=np.float32)
    rope = wb.Rope(*rope3d_tables(grid_for(args.tokens), cfg.head_dim))
    ks = KernelSet("numba")
    ks.compile()
    cached = {q: wb.context_kv(ks, cfg, blocks[q].cross_attn, context) for q in TYPES} if args.cached_context else {}

    def run(qtype: str):
        weights = blocks[qtype]
        context_kv = cached[qtype] if qtype in cached else wb.context_kv(ks, cfg, weights.cross_attn, context)
        return wb.wan_block(ks, cfg, weights, x, temb, rope, context_kv)[0]

    outputs = {qtype: run(qtype) for qtype in TYPES}  # warm-up, and the outputs compared
    wall, cpu = {q: [] for q in TYPES}, {q: [] for q in TYPES}
    for _ in range(args.repeats):
        for qtype in TYPES:
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            run(qtype)
            cpu[qtype].append((time.process_time() - cpu_start) * 1e3)
            wall[qtype].append((time.perf_counter() - wall_start) * 1e3)
    reference = outputs["f32"]
    errors = {q: float(np.sqrt(np.mean((outputs[q] - reference) ** 2) / np.mean(reference ** 2))) for q in TYPES}
    return wall, cpu, errors


def torch_reference(args) -> tuple[dict | None, str]:
    if args.no_torch or args.cached_context:
        return None, ""
    if args.torch_python:
        os.environ[common.REFERENCE_PYTHON_ENV] = args.torch_python
    try:
        return common.run_torch_reference("wan_block", tokens=args.tokens, text_tokens=args.text_tokens,
                                          repeats=args.repeats, warmup=1, dtype="both", threads=args.threads), ""
    except common.ReferenceUnavailable as error:
        return None, f"PyTorch reference not measured: {error}"


def result_rows(memory, wall, cpu, errors, torch_result, flops) -> list[dict]:
    best = {q: min(wall[q]) for q in TYPES}
    best_cpu = {q: min(cpu[q]) for q in TYPES}
    rows = []
    for qtype in TYPES:
        rows.append({"implementation": "embodied_ros (numba)", "weights": qtype.upper(),
                     "weights MiB": round(memory[qtype], 2), "best ms": round(best[qtype], 1),
                     "median ms": round(common.Timing(wall[qtype]).median_ms, 1),
                     "best vs own F32": round(best[qtype] / best["f32"], 3),
                     "CPU ms (best)": round(best_cpu[qtype], 1),
                     "CPU vs own F32": round(best_cpu[qtype] / best_cpu["f32"], 3),
                     "GFLOP/s (best)": round(common.gflops_per_s(flops, best[qtype]), 1),
                     "rel. RMS error vs F32": f"{errors[qtype]:.2e}" if qtype != "f32" else "0 (reference)",
                     "runs ms": ", ".join(f"{t:.0f}" for t in wall[qtype])})
    rows.insert(1, {"implementation": "(stored only)", "weights": "BF16", "weights MiB": round(memory["bf16"], 2)})
    for m in (torch_result or {}).get("measurements", []):
        torch_best = min(m["runs_ms"])
        rows.append({"implementation": "PyTorch diffusers WanTransformerBlock", "weights": m["dtype"].upper(),
                     "weights MiB": torch_result.get("weights_mb") if m["dtype"] == "f32" else None,
                     "best ms": round(torch_best, 1), "median ms": round(m["median_ms"], 1),
                     "best vs own F32": round(torch_best / best["f32"], 3),
                     "GFLOP/s (best)": round(common.gflops_per_s(flops, torch_best), 1),
                     "runs ms": ", ".join(f"{t:.0f}" for t in m["runs_ms"])})
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    for variable in THREAD_VARIABLES:  # before numpy / numba start their thread pools
        os.environ[variable] = str(args.threads)
    machine = common.machine_description()
    print(f"machine: {common.machine_line(machine)}")
    memory, blocks = load_blocks(args.workdir, args.rewrite)
    wall, cpu, errors = time_block(blocks, args)
    torch_result, torch_note = torch_reference(args)
    cfg = full_size_block()
    flops = common.flops_wan_block(args.tokens, args.text_tokens, cfg.dim, cfg.ffn_dim)
    if args.cached_context:
        flops -= 2.0 * 2 * args.text_tokens * cfg.dim * cfg.dim  # the context's K/V projections are not run
    table = common.markdown_table(result_rows(memory, wall, cpu, errors, torch_result, flops),
                                  ["implementation", "weights", "weights MiB", "best ms", "median ms",
                                   "best vs own F32", "CPU ms (best)", "CPU vs own F32", "GFLOP/s (best)",
                                   "rel. RMS error vs F32", "runs ms"])
    print(table)
    best = {q: min(wall[q]) for q in TYPES}
    context = "cached, computed once outside the timed calls" if args.cached_context else "included"
    grid = grid_for(args.tokens)
    origin = ("; LingBot-VA RoboTwin: 3 cameras 256x320 -> 8x10 tokens each per latent frame, 4 latent frames"
              if args.tokens == 960 else "")
    if torch_result:
        torch_line = "PyTorch measured in the same run, right after, with the same thread count."
    elif args.cached_context:
        torch_line = "No PyTorch run: diffusers' block always projects the context K/V."
    else:
        torch_line = torch_note or "No PyTorch run (--no-torch)."
    body = "\n".join([
        f"One Wan2.2-TI2V-5B block (dim {cfg.dim} = {cfg.num_heads} x {cfg.head_dim}, FFN {cfg.ffn_dim}), "
        f"{args.tokens} latent tokens (grid f,h,w = {grid}{origin}), {args.text_tokens} text tokens, per-token "
        f"time embedding, batch 1, {args.threads} thread(s); {flops / 1e9:.1f} GFLOP per call (context K/V "
        f"{context}). Random weights, each type read from a blocks-only bundle written with it (matrices in that "
        f"type; biases, norms and the modulation table F32), multiplied as stored: each product packs its "
        f"weight's float32 rows, or decodes its Q8_0 / Q4_K blocks, into the panels it reads. Runs of the three "
        f"types interleaved, {args.repeats} each after a warm-up. {torch_line} Ratios use each type's best run "
        f"(other processes on a shared machine only add time); CPU ms is this process's CPU time per call."
        f"{common.runtime_products_note()}",
        "", table, "",
        f"Q4_K block: {memory['q4_k']:.2f} MiB (budget 88.1 MiB; BF16 {memory['bf16']:.2f} MiB). Latency, best "
        f"run: Q4_K / F32 {best['q4_k'] / best['f32']:.3f}, Q8_0 / F32 {best['q8_0'] / best['f32']:.3f}. Output "
        f"relative RMS error vs the F32 block: Q8_0 {errors['q8_0']:.2e}, Q4_K {errors['q4_k']:.2e}."])
    if not args.no_write:
        common.write_section(common.BENCHMARKS_MD, args.section, body, command=common.command_line(),
                             machine=common.machine_line(machine))
        print(f"wrote section {args.section} of {common.BENCHMARKS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
