"""GR00T N1.7 on this runtime next to LeRobot's PyTorch GrootPolicy, measured side by side in one run.

    python benchmarks/bench_groot.py [--parts small,full_width] [--types f32,bf16,q8_0] [--repeats 5] [--rounds 3]
                                     [--threads 2] [--workdir DIR] [--generator reference/gen_groot.py]
                                     [--section-suffix S] [--no-write]

Parts, each written to its own BENCHMARKS.md section (groot_small, groot_full_width):
  small       a model-level record of benchmarks/specs/groot_small.json (2 views of 256 x 256, vision
              256 x 6, LM 512 x 4 kept, DiT 8 blocks, horizon 16, 4 steps);
  full_width  benchmarks/specs/groot_full_width.json: the released N1.7 widths (vision 1024, 16 heads;
              LM 2048, 16 / 8 heads of 128, mlp 6144; DiT 1536 = 32 x 48, vl_self_attention 2048;
              horizon 40, 132-wide state and actions, 32 embodiments) at depth 2 / 2 / 2 (one
              deepstack merger, one vl block), 2 views of 256 x 256 (512 patches, 128 image tokens),
              153 prompt tokens: per-layer cost at the released size. The vocabulary is cut to 4096
              rows (a table lookup; its size does not change the compute).
Each record is made with the reference generator when absent and converted to a bundle per stored
type (--types), and case 0 runs per stage (vision tower, LM, head = vl_self_attention + the 4-step
DiT solve) on this runtime and through torch_groot_policy.py (GrootPolicy.predict_action_chunk,
eager float32, and LeRobot's default bfloat16 autocast) in its own process. The sides alternate:
each round runs each stored type --repeats times after one untimed chunk, then each PyTorch dtype
--repeats times after one untimed chunk. Ratios are given for the median and the best run (other
processes only add time).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

HERE = Path(__file__).resolve().parent
STAGES = ("vision", "backbone", "head", "total chunk")
SIDES = (("PyTorch f32", []), ("PyTorch bf16", ["--bf16"]))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="small,full_width")
    parser.add_argument("--types", default="f32,bf16,q8_0", help="stored weight types of this runtime's bundles")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    common.add_workdir_argument(parser, "bench_groot")
    parser.add_argument("--generator", type=Path, default=common.REFERENCE_GENERATORS / "gen_groot.py",
                        help="the records' generator, run in the reference environment (default reference/gen_groot.py)")
    parser.add_argument("--section-suffix", default="", help="appended to the BENCHMARKS.md section names")
    parser.add_argument("--no-write", action="store_true", help="print the sections instead of writing BENCHMARKS.md")
    return parser.parse_args(argv)


def time_chunk(model, inputs) -> tuple[dict, object]:
    pixel_rows, grids, ids, state, noise, embodiment = inputs
    start = time.perf_counter()
    image, deepstack = model.image_rows(pixel_rows, grids)
    vision = time.perf_counter()
    backbone = model.language_backbone(image, deepstack, grids, ids)
    lm = time.perf_counter()
    actions = model.sample_actions(backbone, state, noise, embodiment)
    end = time.perf_counter()
    return {"vision": (vision - start) * 1e3, "backbone": (lm - vision) * 1e3, "head": (end - lm) * 1e3,
            "total chunk": (end - start) * 1e3}, actions


def summary_rows(runs: dict[str, list[dict]], errors: dict[str, float]) -> list[dict]:
    rows = []
    for side, timed in runs.items():
        row = {"run": side}
        for stage in STAGES:
            row[f"{stage} median ms"] = statistics.median(run[stage] for run in timed)
        row["total best ms"] = min(run["total chunk"] for run in timed)
        row["max abs action error"] = f"{errors[side]:.2e}"
        rows.append(row)
    return rows


def ratio(runs: dict[str, list[dict]], slower: str, faster: str) -> str:
    median = statistics.median(r["total chunk"] for r in runs[slower]) / statistics.median(
        r["total chunk"] for r in runs[faster])
    best = min(r["total chunk"] for r in runs[slower]) / min(r["total chunk"] for r in runs[faster])
    return f"{slower} / {faster} {median:.2f}x (median), {best:.2f}x (best)"


def run_part(args, name: str) -> tuple[str, str]:
    import numpy as np

    from embodied_ros.bundle import open_bundle
    from embodied_ros.models.groot.convert import convert
    from embodied_ros.models.groot.runtime import load_model

    record = args.workdir / f"groot_{name}"
    if not (record / "cases.npz").is_file():
        subprocess.run([common.reference_python(), str(args.generator), str(HERE / "specs" / f"groot_{name}.json"),
                        str(record)], check=True, env=common.reference_environment(), capture_output=True)
    types = [t.strip() for t in args.types.split(",")]
    rss_before = common.current_rss_mb()
    models = {}
    for stored in types:
        bundle_path = args.workdir / f"groot_{name}_{stored}.gguf"
        convert(record, bundle_path, stored)
        models[f"ours {stored.upper()}"] = (load_model(open_bundle(bundle_path, architecture="groot")),
                                             os.path.getsize(bundle_path))
    rss_loaded = common.current_rss_mb()
    cases = np.load(record / "cases.npz")
    grids = [tuple(int(v) for v in g[1:]) for g in cases["case0_image_grid_thw"]]
    inputs = (cases["case0_pixel_values"], grids, cases["case0_input_ids"], cases["case0_state"],
              cases["case0_noise"], int(cases["case0_embodiment_id"]))
    runs = {side: [] for side in [*models, *(side for side, _ in SIDES)]}
    errors, notes = {}, {}
    for _ in range(args.rounds):
        for side, (model, _) in models.items():
            time_chunk(model, inputs)
            for _ in range(args.repeats):
                times, actions = time_chunk(model, inputs)
                runs[side].append(times)
            errors[side] = float(np.abs(actions[:, :cases["case0_actions"].shape[1]] - cases["case0_actions"]).max())
        for side, flags in SIDES:
            proc = subprocess.run([common.reference_python(), str(HERE / "torch_groot_policy.py"), str(record),
                                   "--repeats", str(args.repeats), "--threads", str(args.threads), *flags],
                                  capture_output=True, text=True, env=common.reference_environment(), check=True)
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[side] += result["runs"]
            notes[side], errors[side] = result, result["max_abs_err"]
    rows = summary_rows(runs, errors)
    fastest_torch = min((side for side, _ in SIDES), key=lambda side: statistics.median(
        r["total chunk"] for r in runs[side]))
    config = json.loads((record / "config.json").read_text())
    vision, text, head = config["vision"], config["text_model"], config["action_head"]
    body = "\n".join([
        f"groot_{name} (benchmarks/specs/groot_{name}.json: {config['n_views']} views {config['image_hw']}, patch "
        f"{vision['patch_size']}, merge {vision['spatial_merge_size']}; vision {vision['width']} x {vision['depth']} "
        f"({vision['num_heads']} heads); LM {text['width']} x {config['select_layer']} kept ({text['num_heads']} / "
        f"{text['num_kv_heads']} heads of {text['head_dim']}, mlp {text['mlp_dim']}); DiT "
        f"{head['input_embedding_dim']} x {head['dit']['num_layers']}, vl_self_attention "
        f"{head['vl_self_attention']['num_layers']}; {config['cases'][0]['n_tokens']} prompt tokens; horizon "
        f"{head['action_horizon']}, {head['num_inference_timesteps']} Euler steps), case 0, "
        f"{args.threads} threads. {args.rounds} rounds of {args.repeats} runs per side and type, alternating; PyTorch is "
        "LeRobot's GrootPolicy.predict_action_chunk (eager float32, and its default bfloat16 autocast) in its own "
        "process." + common.runtime_products_note(),
        "",
        common.markdown_table(rows),
        "",
        "Chunk: " + "; ".join(ratio(runs, torch_side, ours) for ours in models for torch_side, _ in SIDES) + ". "
        f"LeRobot's fastest dtype here: {fastest_torch}.",
        "",
        f"Memory: this process held {rss_before:.0f} MiB before the bundles were loaded and {rss_loaded:.0f} MiB with "
        f"all {len(models)} loaded (bundles " + ", ".join(f"{side.split()[1]} {size / 2**20:.1f} MiB"
                                                           for side, (_, size) in models.items())
        + "); PyTorch processes " + ", ".join(f"{side} {notes[side]['peak_rss_mb']:.0f} MiB peak" for side, _ in SIDES)
        + ". Action errors are against the float32 record.",
        "",
        "Runs (ms), total chunk: " + "; ".join(f"{side} " + ", ".join(f"{run['total chunk']:.1f}" for run in timed)
                                               for side, timed in runs.items()) + "."])
    return f"groot_{name}", body


def main(argv=None) -> int:
    args = parse_args(argv)
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[variable] = str(args.threads)
    args.workdir.mkdir(parents=True, exist_ok=True)
    machine = common.machine_line()
    for part in args.parts.split(","):
        section, body = run_part(args, part.strip())
        print(body, flush=True)
        if not args.no_write:
            common.write_section(common.REPO_ROOT / "BENCHMARKS.md", section + args.section_suffix, body,
                                 common.command_line(), machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
