"""pi0.5 (and pi0) on this runtime next to LeRobot's PyTorch policy, measured side by side in one run.

    python benchmarks/bench_pi05.py [--parts small,layers,quant] [--repeats 5] [--rounds 3]
                                    [--threads 2] [--torch-python PATH | --no-torch]
                                    [--record test/data/pi05_small] [--workdir DIR]
                                    [--openblas-kernels env|auto|NAME] [--section-suffix S]
                                    [--rewrite] [--no-write]

Parts, each written to its own BENCHMARKS.md section:
  small   (pi05_small) the record converted to an F32 bundle (`embodied-ros bundle convert`): per-stage
          latency of one action chunk on case 0 (vision, prefix, each Euler step, total) and peak
          memory, next to `torch_reference.py pi05_small` (PI05Policy.predict_action_chunk); plus a
          check, on one audited chunk, that the solver steps never recompute the prefix.
  layers  (pi05_full_size_layers) one SigLIP, Gemma-2B and expert layer at full size with random
          weights (pi05_layers.py) in F32, Q8_0 and Q4_K, next to torch_reference.py's
          siglip_layer / gemma_layer / expert_layer, with numpy's sgemm rate at the layer's largest
          product measured in the same run.
          With --record of a pi0 record (reference/gen_pi0.py on benchmarks/specs/pi0_small.json) the
          same part measures pi0 next to `torch_reference.py pi0_small` (PI0Policy), in a section
          named after the record folder.
  quant   (pi05_small_quantized) Q8_0 and Q4_K bundles of the record: file and weight bytes against
          F32, max abs action error on every case of the record, chunk latency, `bundle verify`.

numpy's OpenBLAS picks its CPU kernels when it loads, from the CPU or from OPENBLAS_CORETYPE;
--openblas-kernels auto drops that variable for this run (and its subprocesses), NAME sets it,
env (the default) leaves the environment alone. The machine line names the kernels in use.
PyTorch runs MKL and is not affected.

The two sides alternate: each of --rounds rounds runs this runtime --repeats times (after one
untimed warm-up) and then the PyTorch reference --repeats times in its own process, so both see
the same machine load. Other processes on a shared machine only add time, so ratios are given
for the best run as well as for the median. FLOP counts follow common.py (padded lengths,
full last LM layer); this runtime drops padding rows and the last layer's unused half, so its
GFLOP/s figures count work it does not do and compare like with like.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

PARTS = ("small", "layers", "quant")
QUANT_TYPES = ("f32", "q8_0", "q4_k")
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")
# Untimed chunks at the start of each round. After the PyTorch process ran for a few seconds the
# first chunks here took up to 2 s (pages of the idle process reclaimed meanwhile); on a robot the
# process never idles that long.
WARM_UP_RUNS = 3
SECTIONS = {"small": "pi05_small", "layers": "pi05_full_size_layers", "quant": "pi05_small_quantized"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per side and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of this runtime and PyTorch")
    parser.add_argument("--threads", type=int, default=2, help="BLAS, numba and torch threads")
    parser.add_argument("--torch-python", help=common.reference_python_help())
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch reference")
    parser.add_argument("--record", type=Path, default=common.REPO_ROOT / "test" / "data" / "pi05_small")
    common.add_workdir_argument(parser, "bench_pi05", "where bundles are written")
    parser.add_argument("--rewrite", action="store_true", help="convert the bundles again even if --workdir has them")
    parser.add_argument("--openblas-kernels", default="env",
                        help="env: as the environment says; auto: OpenBLAS picks for the CPU; or a core name")
    parser.add_argument("--section-suffix", default="", help="appended to the BENCHMARKS.md section names")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown or not args.parts:
        parser.error(f"--parts takes {', '.join(PARTS)}; got {args.parts}")
    if min(args.repeats, args.rounds, args.threads) < 1:
        parser.error("--repeats, --rounds and --threads must be >= 1")
    if not (args.record / "cases.npz").is_file():
        parser.error(f"--record {args.record} is not a pi0.5 or pi0 reference record (no cases.npz)")
    return args


# ---------------------------------------------------------------- shared pieces

def torch_runs(args, mode: str, **options) -> dict | None:
    """One round of the PyTorch reference (its own process), or None without it."""
    if args.no_torch:
        return None
    return common.run_torch_reference(mode, repeats=args.repeats, warmup=1, threads=args.threads, **options)


def convert_bundle(args, qtype: str) -> Path:
    """The record as a bundle stored as `qtype`, written by the CLI (reused from --workdir)."""
    path = args.workdir / f"{args.record.name}_{qtype}.gguf"
    if args.rewrite or not path.is_file():
        args.workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "embodied_ros.cli.main", "bundle", "convert", str(args.record),
                        str(path), "--quant", qtype, "--reference", str(args.record), "--no-progress"], check=True)
    return path


def load_runtime(path: Path):
    """(bundle, runtime) of a pi05 or pi0 bundle file; load_runtime compiles every kernel (warm-up)."""
    import importlib

    from embodied_ros.bundle import open_bundle
    bundle = open_bundle(path)
    return bundle, importlib.import_module(f"embodied_ros.models.{bundle.architecture}").load_runtime(bundle)


def is_pi0_record(record: Path) -> bool:
    return (record / "config.json").is_file() and "suffix" in (record / "config.json").read_text()


def record_case(record: Path, k: int = 0) -> dict:
    import numpy as np
    with np.load(record / "cases.npz") as cases:
        return {"images": cases[f"case{k}_images"] * np.float32(2.0) - np.float32(1.0),
                "camera_mask": cases[f"case{k}_image_masks"], "tokens": cases[f"case{k}_tokens"],
                "token_mask": cases[f"case{k}_token_mask"], "noise": cases[f"case{k}_noise"],
                "actions": cases[f"case{k}_actions"],
                **({"state": cases[f"case{k}_state"]} if f"case{k}_state" in cases else {})}  # pi0: a state token


def kernels_note() -> str:
    """Sentences on numpy's OpenBLAS kernels when the environment chose them, and on what runs this
    runtime's products."""
    info = common.machine_description()
    forced, kernels = info.get("openblas_coretype_env"), (info.get("blas") or {}).get("kernels")
    note = ""
    if forced and kernels:
        note = (f" numpy's OpenBLAS runs its {kernels} kernels here because the environment sets "
                f"OPENBLAS_CORETYPE={forced}; `--openblas-kernels auto` measures the kernels OpenBLAS picks for "
                "this CPU (sections ending in _openblas_auto).")
    return note + common.runtime_products_note()


def best(runs: list[float]) -> float:
    return min(runs)


def median(runs: list[float]) -> float:
    return common.Timing(runs).median_ms


def ms_list(runs: list[float]) -> str:
    return ", ".join(f"{t:.1f}" for t in runs)


# ---------------------------------------------------------------- part small

class ChunkClock:
    """Times the stages of one chunk: image_tokens, build_prefix, and each Euler step (the model's
    `velocity`, wrapped on the instance), as Pi05Model runs them."""

    def __init__(self, model):
        self.model, self.steps = model, []
        inner = model.velocity

        def timed_velocity(*a, **k):
            start = time.perf_counter()
            out = inner(*a, **k)
            self.steps.append((time.perf_counter() - start) * 1e3)
            return out
        model.velocity = timed_velocity

    def run(self, case: dict) -> tuple[dict, "object"]:
        m, self.steps = self.model, []
        start = time.perf_counter()
        tokens = m.image_tokens(case["images"], case["camera_mask"])
        after_vision = time.perf_counter()
        cache = m.build_prefix(tokens, case["camera_mask"], case["tokens"], case["token_mask"], *prefix_extra(case))
        after_prefix = time.perf_counter()
        actions = m.sample_actions(cache, case["noise"])
        end = time.perf_counter()
        return {"vision": (after_vision - start) * 1e3, "prefix": (after_prefix - after_vision) * 1e3,
                "steps": self.steps, "total": (end - start) * 1e3}, actions


def prefix_extra(case: dict) -> tuple:
    """build_prefix's arguments after the token mask: pi0's state (its state token joins the cache)."""
    return (case["state"],) if "state" in case else ()


def audit_prefix_reuse(model, case: dict) -> dict:
    """Count prefix passes and expert layers over one chunk, and check that every expert layer
    reads the one sealed cache, which the solve leaves read-only and unchanged."""
    import hashlib

    import numpy as np

    from embodied_ros.backbone import gemma
    from embodied_ros.heads import action_time_expert, adarms_expert
    expert_module, layer_name = ((action_time_expert, "decoder_layer") if "state" in case
                                 else (adarms_expert, "expert_layer"))
    counts = {"prefix_passes": 0, "lm_layers": 0, "expert_layers": 0, "cache_reads": 0}
    cache_box = {}
    originals = gemma.prefix_pass, getattr(expert_module, layer_name)

    def counting_prefix_pass(ks, cfg, layers, *rest, **kw):
        counts["prefix_passes"] += 1
        counts["lm_layers"] += len(layers)
        return originals[0](ks, cfg, layers, *rest, **kw)

    def counting_expert_layer(ks, cfg, w, x, cache_keys, cache_values, *rest):
        counts["expert_layers"] += 1
        sealed = cache_box["cache"]
        counts["cache_reads"] += bool(np.shares_memory(cache_keys, sealed.keys)
                                      and np.shares_memory(cache_values, sealed.values))
        return originals[1](ks, cfg, w, x, cache_keys, cache_values, *rest)

    gemma.prefix_pass = counting_prefix_pass
    setattr(expert_module, layer_name, counting_expert_layer)
    try:
        tokens = model.image_tokens(case["images"], case["camera_mask"])
        cache = cache_box["cache"] = model.build_prefix(tokens, case["camera_mask"], case["tokens"],
                                                        case["token_mask"], *prefix_extra(case))
        passes_before_solve = counts["prefix_passes"]
        digest = hashlib.sha256(cache.keys.tobytes() + cache.values.tobytes()).hexdigest()
        model.sample_actions(cache, case["noise"])
        unchanged = digest == hashlib.sha256(cache.keys.tobytes() + cache.values.tobytes()).hexdigest()
    finally:
        gemma.prefix_pass = originals[0]
        setattr(expert_module, layer_name, originals[1])
    return {**counts, "prefix_passes_in_solve": counts["prefix_passes"] - passes_before_solve,
            "cache_read_only": not (cache.keys.flags.writeable or cache.values.flags.writeable),
            "cache_unchanged": unchanged, "steps": model.config.num_inference_steps,
            "expert_depth": model.config.expert.depth}


def part_small(args) -> tuple[str, str]:
    import json

    import numpy as np
    rss_start = common.current_rss_mb()
    bundle, runtime = load_runtime(convert_bundle(args, "f32"))
    model = runtime.model
    config = json.loads((args.record / "config.json").read_text())
    case, clock = record_case(args.record), ChunkClock(model)
    audit = audit_prefix_reuse(model, case)
    ours, torch_rounds = [], []
    for _ in range(args.rounds):
        for _ in range(WARM_UP_RUNS):  # untimed: pages and caches warm again after the other side ran
            clock.run(case)
        for _ in range(args.repeats):
            stages, actions = clock.run(case)
            ours.append(stages)
        torch_rounds.append(torch_runs(args, "pi0_small" if is_pi0_record(args.record) else "pi05_small",
                                       record=args.record))
    error = float(np.abs(actions[:, : case["actions"].shape[1]] - case["actions"]).max())
    from embodied_ros.kernels.cpu.gemm import PackedWeight
    packed = any(isinstance(w, PackedWeight) for w in model.weights.values())
    memory = {"peak_rss_mb": common.peak_rss_mb(), "rss_start_mb": rss_start,
              "weights_mib": sum(bundle.tensor_info(n).nbytes for n in bundle.weight_names) / 2**20,
              "weights_form": ("memory-mapped; the float32 matrices copied once into the panels the CPU product "
                               "reads" if packed else "memory-mapped")}
    return small_report(args, config, ours, [r for r in torch_rounds if r], audit, error, memory)


def _torch_stage_runs(torch_rounds: list[dict]) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {}
    for result in torch_rounds:
        for m in result["measurements"]:
            runs.setdefault(m["name"], []).extend(m["runs_ms"])
    return runs


def small_report(args, config, ours, torch_rounds, audit, error, memory) -> tuple[str, str]:
    flops = common.flops_pi05_chunk(config)
    steps = config["num_inference_steps"]
    our_runs = {"vision": [r["vision"] for r in ours], "prefix": [r["prefix"] for r in ours],
                **{f"expert_step_{s}": [r["steps"][s] for r in ours] for s in range(steps)},
                "expert_steps_sum": [sum(r["steps"]) for r in ours], "total": [r["total"] for r in ours]}
    theirs = _torch_stage_runs(torch_rounds)
    stage_flops = {"vision": flops["vision"], "prefix": flops["prefix"], "expert_steps_sum": steps * flops["expert_step"],
                   "total": flops["total"], **{f"expert_step_{s}": flops["expert_step"] for s in range(steps)}}
    labels = {"expert_steps_sum": f"solver ({steps} steps)", "total": "**total chunk**"}
    rows = []
    for name, runs in our_runs.items():
        row = {"stage": labels.get(name, name.replace("expert_step_", "Euler step ")),
               "ours best ms": best(runs), "ours median ms": median(runs),
               "GFLOP/s ours (best)": common.gflops_per_s(stage_flops[name], best(runs))}
        if name in theirs:
            row.update({"PyTorch best ms": best(theirs[name]), "PyTorch median ms": median(theirs[name]),
                        "PyTorch / ours (median)": median(theirs[name]) / median(runs),
                        "PyTorch / ours (best)": best(theirs[name]) / best(runs),
                        "GFLOP/s PyTorch (best)": common.gflops_per_s(stage_flops[name], best(theirs[name]))})
        rows.append(row)
    table = common.markdown_table(rows, ["stage", "ours best ms", "ours median ms", "PyTorch best ms",
                                         "PyTorch median ms", "PyTorch / ours (median)", "PyTorch / ours (best)",
                                         "GFLOP/s ours (best)", "GFLOP/s PyTorch (best)"])
    sgemm = common.numpy_matmul_gflops(config["prefix_len"], config["language_model"]["width"],
                                       config["language_model"]["mlp_dim"], repeats=20)
    torch_memory = max((r["memory"]["peak_rss_mb"] for r in torch_rounds), default=None)
    torch_error = max((r["max_abs_err_vs_record"] for r in torch_rounds), default=None)
    total = (median(our_runs["total"]), best(our_runs["total"]))
    lines = [
        f"{args.record.name} ({config.get('model', 'pi0.5')}; {args.record}: {config['n_cameras']} cameras "
        f"{config['vision']['image_size']}px, "
        f"prefix {config['prefix_len']} rows, LM {config['language_model']['width']} x "
        f"{config['language_model']['depth']}, expert {config['expert']['width']} x {config['expert']['depth']}, "
        f"chunk {config['chunk_size']}, {steps} Euler steps), case 0, F32 bundle, {args.threads} threads. "
        f"{args.rounds} rounds of {args.repeats} runs per side, alternating (each round: this runtime, then "
        f"PyTorch in its own process; untimed runs first: {WARM_UP_RUNS} here, 1 there).{kernels_note()}",
        "", table, ""]
    if "total" in theirs:
        lines.append(f"Chunk: PyTorch / ours = {median(theirs['total']) / total[0]:.2f}x on medians, "
                     f"{best(theirs['total']) / total[1]:.2f}x on best runs (target >= 2x).")
    else:
        lines.append("No PyTorch run (--no-torch or the reference environment is missing).")
    lines += [
        "",
        f"Prefix computed once per chunk: {audit['prefix_passes']} prefix pass ({audit['lm_layers']} LM layers: the "
        f"{audit['expert_depth']} the expert reads, the last one up to its K/V); prefix passes during the "
        f"{audit['steps']} solver steps: {audit['prefix_passes_in_solve']}; expert layers run: "
        f"{audit['expert_layers']} ({audit['steps']} steps x {audit['expert_depth']} layers), "
        f"{audit['cache_reads']} of them reading views of the one sealed cache; cache arrays read-only: "
        f"{audit['cache_read_only']}, bytes unchanged by the solve: {audit['cache_unchanged']}.",
        "",
        f"Memory: peak RSS of this process {memory['peak_rss_mb']:.0f} MiB ({memory['rss_start_mb']:.0f} MiB with numpy "
        f"imported, before the runtime and its compiled kernels were loaded; weights {memory['weights_mib']:.1f} MiB, "
        f"{memory['weights_form']})"
        + (f"; PyTorch process {torch_memory:.0f} MiB." if torch_memory else "."),
        f"Max abs action error vs the record, case 0: ours {error:.2e}"
        + (f", PyTorch policy {torch_error:.2e}." if torch_error is not None else "."),
        f"numpy sgemm in the same run, {sgemm['shape'][0]}x{sgemm['shape'][1]} @ {sgemm['shape'][1]}x"
        f"{sgemm['shape'][2]}: {sgemm['gflops_per_s']:.0f} GFLOP/s.",
        "", "Runs (ms), total chunk: ours " + ms_list(our_runs["total"])
        + ("; PyTorch " + ms_list(theirs["total"]) if "total" in theirs else "") + "."]
    return (SECTIONS["small"] if args.record.name == "pi05_small" else args.record.name), "\n".join(lines)


# ---------------------------------------------------------------- part layers

def part_layers(args) -> tuple[str, str]:
    import pi05_layers
    return SECTIONS["layers"], pi05_layers.measure(args, QUANT_TYPES, lambda mode: torch_runs(args, mode),
                                                   kernels_note())


# ---------------------------------------------------------------- part quant

def part_quant(args) -> tuple[str, str]:
    from embodied_ros.models.kit import records
    from embodied_ros.models.pi05 import RECORDS
    paths = {q: convert_bundle(args, q) for q in QUANT_TYPES}
    loaded = {q: load_runtime(paths[q]) for q in QUANT_TYPES}
    sizes, errors, tolerance = {}, {}, {}
    for qtype, (bundle, runtime) in loaded.items():
        sizes[qtype] = {"file": paths[qtype].stat().st_size,
                        "weights": sum(bundle.tensor_info(n).nbytes for n in bundle.weight_names),
                        "types": sorted({bundle.tensor_info(n).qtype.upper() for n in bundle.weight_names})}
        tolerance[qtype] = float(bundle.reference.tolerance)
        errors[qtype] = [r.max_abs_error for r in records.model_record_cases(runtime.model, args.record,
                                                                                tolerance[qtype], RECORDS.model_prefix)]
    case = record_case(args.record)
    clocks = {q: ChunkClock(loaded[q][1].model) for q in QUANT_TYPES}
    latency = {q: [] for q in QUANT_TYPES}
    for _ in range(args.rounds):
        for clock in clocks.values():
            for _ in range(WARM_UP_RUNS):
                clock.run(case)
        for _ in range(args.repeats):
            for qtype in QUANT_TYPES:
                latency[qtype].append(clocks[qtype].run(case)[0]["total"])
    verify = {q: subprocess.run([sys.executable, "-m", "embodied_ros.cli.main", "bundle", "verify", str(paths[q])],
                                capture_output=True, text=True) for q in QUANT_TYPES}
    return quant_report(args, sizes, errors, tolerance, latency, verify)


def quant_report(args, sizes, errors, tolerance, latency, verify) -> tuple[str, str]:
    f32_weights = sizes["f32"]["weights"]
    targets = {"q8_0": 0.55, "q4_k": 0.30}
    rows, verdicts = [], []
    for qtype in QUANT_TYPES:
        s, v = sizes[qtype], verify[qtype]
        verdict = v.stdout.strip().splitlines()[-1] if v.stdout.strip() else v.stderr.strip()[-200:]
        rows.append({"bundle": qtype.upper(), "stored types": "+".join(s["types"]), "file MiB": s["file"] / 2**20,
                     "weights MiB": s["weights"] / 2**20, "file / F32 weights": s["file"] / f32_weights,
                     "weights / F32 weights": s["weights"] / f32_weights,
                     "max abs action error (all cases)": f"{max(errors[qtype]):.3g}",
                     "per case": ", ".join(f"{e:.2g}" for e in errors[qtype]),
                     "recorded tolerance": tolerance[qtype],
                     "chunk best ms": best(latency[qtype]), "chunk median ms": median(latency[qtype]),
                     "chunk vs F32 (median)": median(latency[qtype]) / median(latency["f32"]),
                     "bundle verify": f"exit {v.returncode}: {verdict}"})
        if qtype in targets:
            ratio = s["file"] / f32_weights
            verdicts.append(f"{qtype.upper()} file {ratio:.3f}x of the F32 weights (target <= {targets[qtype]}: "
                            f"{'met' if ratio <= targets[qtype] else 'NOT met'}), verify "
                            f"{'passes' if v.returncode == 0 else 'FAILS'}")
    columns = ["bundle", "stored types", "file MiB", "weights MiB", "file / F32 weights", "weights / F32 weights",
               "max abs action error (all cases)", "per case", "recorded tolerance", "chunk best ms",
               "chunk median ms", "chunk vs F32 (median)", "bundle verify"]
    body = "\n".join([
        f"Quantized bundles of {args.record.name} (`embodied-ros bundle convert {args.record.name} OUT --quant TYPE "
        f"--reference {args.record.name}`; matrices whose input width is not a multiple of the type's block fall back, "
        "q4_k -> q8_0 -> f16). Action error: the largest |action - reference| over every case of the record (the "
        "reference being LeRobot's F32 PyTorch policy). Chunk latency: case 0, the three bundles interleaved, "
        f"{args.rounds} x {args.repeats} runs each, {args.threads} threads. `bundle verify` reruns the record stored "
        "in the bundle against the tolerance the conversion recorded for its weakest stored type.",
        "", common.markdown_table(rows, columns), "", "; ".join(verdicts) + "."])
    return SECTIONS["quant"], body


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    args = parse_args(argv)
    for variable in THREAD_VARIABLES:  # before numpy / numba start their thread pools
        os.environ[variable] = str(args.threads)
    if args.openblas_kernels == "auto":  # before numpy loads OpenBLAS
        os.environ.pop("OPENBLAS_CORETYPE", None)
    elif args.openblas_kernels != "env":
        os.environ["OPENBLAS_CORETYPE"] = args.openblas_kernels
    if args.torch_python:
        os.environ[common.REFERENCE_PYTHON_ENV] = args.torch_python
    if not args.no_torch and not Path(common.reference_python()).exists():
        print(f"no PyTorch reference at {common.reference_python()}: measuring this runtime only", file=sys.stderr)
        args.no_torch = True
    machine = common.machine_line(common.machine_description())  # the load before this run adds its own
    print(f"machine: {machine}")
    parts = {"small": part_small, "layers": part_layers, "quant": part_quant}
    for part in (p for p in PARTS if p in args.parts):  # small first: its peak memory is the process's
        start = time.perf_counter()
        section, body = parts[part](args)
        section += args.section_suffix
        print(f"\n## {section} ({time.perf_counter() - start:.0f} s)\n{body}")
        if not args.no_write:
            common.write_section(common.BENCHMARKS_MD, section, body, command=common.command_line(),
                                 machine=machine)
            print(f"wrote section {section} of {common.BENCHMARKS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
