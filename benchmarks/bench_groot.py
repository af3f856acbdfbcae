"""GR00T N1.7 on this runtime next to LeRobot's PyTorch GrootPolicy, measured side by side in one run.

    python benchmarks/bench_groot.py [--parts small,full_width] [--repeats 5] [--rounds 3] [--threads 2]
                                     [--workdir /tmp/bench_groot] [--generator gen_groot_fixture.py] [--no-write]

Parts, each written to its own BENCHMARKS.md section (groot_small, groot_full_width):
  small       a model-level record of benchmarks/specs/groot_small.json (2 views of 256 x 256, vision
              256 x 6, LM 512 x 4 kept, DiT 8 blocks, horizon 16, 4 steps);
  full_width  benchmarks/specs/groot_full_width.json: the released N1.7 widths (vision 1024, 16 heads;
              LM 2048, 16 / 8 heads of 128, mlp 6144; DiT 1536 = 32 x 48, vl_self_attention 2048;
              horizon 40, 132-wide state and actions, 32 embodiments) at depth 2 / 2 / 2 (one
              deepstack merger, one vl block), 2 views of 256 x 256 (512 patches, 128 image tokens),
              153 prompt tokens: per-layer cost at the released size. The vocabulary is cut to 4096
              rows (a table lookup; its size does not change the compute).
Each record is made with the reference generator when absent, converted to an F32 bundle, and case 0
runs per stage (vision tower, LM, head = vl_self_attention + the 4-step DiT solve) on this runtime
and through torch_groot_policy.py (GrootPolicy.predict_action_chunk, eager float32, and LeRobot's
default bfloat16 autocast) in its own process. The sides alternate: each round runs this runtime
--repeats times after one untimed chunk, then each PyTorch dtype --repeats times after one untimed
chunk. Ratios are given for the best run and the median (other processes only add time).
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
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_groot"))
    parser.add_argument("--generator", type=Path, default=Path("/work/shared/reference/gen_groot_fixture.py"))
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


def summary_rows(ours: list[dict], theirs: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for stage in STAGES:
        mine = [run[stage] for run in ours]
        row = {"stage": f"**{stage}**" if stage == "total chunk" else stage, "ours median ms": statistics.median(mine)}
        for side, runs in theirs.items():
            other = [run[stage] for run in runs]
            row[f"{side} median ms"] = statistics.median(other)
            row[f"{side} / ours (median, best)"] = (f"{statistics.median(other) / statistics.median(mine):.2f}x, "
                                                   f"{min(other) / min(mine):.2f}x")
        rows.append(row)
    return rows


def run_part(args, name: str) -> tuple[str, str]:
    import numpy as np

    from embodied_ros.bundle import open_bundle
    from embodied_ros.models.groot.convert import convert
    from embodied_ros.models.groot.runtime import load_model

    record = args.workdir / f"groot_{name}"
    if not (record / "cases.npz").is_file():
        subprocess.run([common.reference_python(), str(args.generator), str(HERE / "specs" / f"groot_{name}.json"),
                        str(record)], check=True, env=common.reference_environment(), capture_output=True)
    bundle_path = args.workdir / f"groot_{name}.gguf"
    convert(record, bundle_path, "f32")
    rss_before = common.current_rss_mb()
    model = load_model(open_bundle(bundle_path, architecture="groot"))
    cases = np.load(record / "cases.npz")
    grids = [tuple(int(v) for v in g[1:]) for g in cases["case0_image_grid_thw"]]
    inputs = (cases["case0_pixel_values"], grids, cases["case0_input_ids"], cases["case0_state"],
              cases["case0_noise"], int(cases["case0_embodiment_id"]))
    ours, theirs, notes = [], {side: [] for side, _ in SIDES}, {}
    error = None
    for _ in range(args.rounds):
        time_chunk(model, inputs)
        for _ in range(args.repeats):
            times, actions = time_chunk(model, inputs)
            ours.append(times)
        error = float(np.abs(actions[:, :cases["case0_actions"].shape[1]] - cases["case0_actions"]).max())
        for side, flags in SIDES:
            proc = subprocess.run([common.reference_python(), str(HERE / "torch_groot_policy.py"), str(record),
                                   "--repeats", str(args.repeats), "--threads", str(args.threads), *flags],
                                  capture_output=True, text=True, env=common.reference_environment(), check=True)
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            theirs[side] += result["runs"]
            notes[side] = result
    rows = summary_rows(ours, theirs)
    config = json.loads((record / "config.json").read_text())
    vision, text, head = config["vision"], config["text_model"], config["action_head"]
    total = {side: rows[-1][f"{side} / ours (median, best)"] for side, _ in SIDES}
    body = "\n".join([
        f"groot_{name} (benchmarks/specs/groot_{name}.json: {config['n_views']} views {config['image_hw']}, patch "
        f"{vision['patch_size']}, merge {vision['spatial_merge_size']}; vision {vision['width']} x {vision['depth']} "
        f"({vision['num_heads']} heads); LM {text['width']} x {config['select_layer']} kept ({text['num_heads']} / "
        f"{text['num_kv_heads']} heads of {text['head_dim']}, mlp {text['mlp_dim']}); DiT "
        f"{head['input_embedding_dim']} x {head['dit']['num_layers']}, vl_self_attention "
        f"{head['vl_self_attention']['num_layers']}; {config['cases'][0]['n_tokens']} prompt tokens; horizon "
        f"{head['action_horizon']}, {head['num_inference_timesteps']} Euler steps), case 0, F32 bundle, "
        f"{args.threads} threads. {args.rounds} rounds of {args.repeats} runs per side, alternating; PyTorch is "
        "LeRobot's GrootPolicy.predict_action_chunk (eager float32, and its default bfloat16 autocast) in its own "
        "process." + common.runtime_products_note(),
        "",
        common.markdown_table(rows),
        "",
        "Chunk, PyTorch / ours (median, best): " + "; ".join(f"{side} {ratio}" for side, ratio in total.items()) + ".",
        "",
        f"Memory: peak RSS of this process {common.peak_rss_mb():.0f} MiB ({rss_before:.0f} MiB before the model was "
        f"loaded; bundle {os.path.getsize(bundle_path) / 2**20:.1f} MiB); PyTorch processes "
        + ", ".join(f"{side} {notes[side]['peak_rss_mb']:.0f} MiB" for side, _ in SIDES) + ".",
        f"Max abs action error vs the record, case 0: ours {error:.2e}, "
        + ", ".join(f"{side} {notes[side]['max_abs_err']:.2e}" for side, _ in SIDES) + ".",
        "",
        "Runs (ms), total chunk: ours " + ", ".join(f"{run['total chunk']:.1f}" for run in ours) + "; "
        + "; ".join(f"{side} " + ", ".join(f"{run['total chunk']:.1f}" for run in theirs[side]) for side, _ in SIDES)
        + "."])
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
            common.write_section(common.REPO_ROOT / "BENCHMARKS.md", section, body, common.command_line(), machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
