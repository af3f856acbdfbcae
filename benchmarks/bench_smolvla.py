"""SmolVLA on this runtime next to LeRobot's PyTorch SmolVLA, measured side by side in one run.

    python benchmarks/bench_smolvla.py [--parts small,full] [--repeats 5] [--rounds 3] [--threads 2]
                                       [--record DIR] [--generator reference/gen_smolvla.py]
                                       [--workdir DIR] [--no-write]

Parts, each written to its own BENCHMARKS.md section:
  small  (smolvla_small) a reference record of benchmarks/specs/smolvla_small.json (made with the
         reference generator when --record does not exist yet), converted to an F32 bundle: chunk
         latency per stage (vision, prefix pass, 10-step solver, total) and peak memory of case 0,
         next to torch_smolvla_policy.py (SmolVLAPolicy.predict_action_chunk, eager float32) in its
         own process. The sides alternate: each round runs this runtime --repeats times after one
         untimed chunk, then PyTorch --repeats times after one untimed chunk.
  full   (smolvla_full_size) SmolVLA at its released size with random weights (SigLIP 768 x 12 at
         512 px, patch 16, pixel shuffle 4 -> 64 tokens per camera; the 16 kept SmolLM2 layers, 960
         wide, 15 heads / 5 kv heads of 64; the expert 720 wide x 16, mlp 2048), 3 cameras, 48 valid
         tokens, chunk 50, 10 steps, weights stored Q8_0 where the row length allows (the expert's
         720-wide inputs stay F32): per-stage latency and peak memory of this runtime only.
Ratios are given for the best run as well as the median (other processes on a shared machine only
add time).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

HERE = Path(__file__).resolve().parent
STAGES = ("vision", "prefix", "solver", "total chunk")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="small,full")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--record", type=Path, help="the smolvla_small record, made there when absent "
                                                    "(default: WORKDIR/smolvla_small)")
    parser.add_argument("--generator", type=Path, default=common.REFERENCE_GENERATORS / "gen_smolvla.py",
                        help="the record's generator, run in the reference environment (default reference/gen_smolvla.py)")
    common.add_workdir_argument(parser, "bench_smolvla")
    parser.add_argument("--no-write", action="store_true", help="print the sections instead of writing BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.record is None:
        args.record = args.workdir / "smolvla_small"
    return args


def set_threads(threads: int) -> None:
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[name] = str(threads)


def time_chunk(model, images, mask, tokens, token_mask, state, noise) -> dict:
    times = {}
    start = time.perf_counter()
    image_tokens = model.image_tokens(images, mask)
    times["vision"] = time.perf_counter()
    cache = model.build_prefix(image_tokens, mask, tokens, token_mask, state)
    times["prefix"] = time.perf_counter()
    actions = model.sample_actions(cache, noise)
    times["solver"] = time.perf_counter()
    out = {"vision": (times["vision"] - start) * 1e3, "prefix": (times["prefix"] - times["vision"]) * 1e3,
           "solver": (times["solver"] - times["prefix"]) * 1e3, "total chunk": (times["solver"] - start) * 1e3}
    return out, actions


def summary_rows(ours: list[dict], theirs: list[dict] | None) -> list[dict]:
    import statistics
    rows = []
    for stage in STAGES:
        mine = [run[stage] for run in ours]
        row = {"stage": f"**{stage}**" if stage == "total chunk" else stage, "ours best ms": min(mine),
               "ours median ms": statistics.median(mine)}
        if theirs:
            other = [run[stage] for run in theirs]
            row.update({"PyTorch best ms": min(other), "PyTorch median ms": statistics.median(other),
                        "PyTorch / ours (median)": statistics.median(other) / statistics.median(mine),
                        "PyTorch / ours (best)": min(other) / min(mine)})
        rows.append(row)
    return rows


def part_small(args) -> tuple[str, str]:
    import numpy as np

    from embodied_ros.bundle import open_bundle
    from embodied_ros.models.smolvla.convert import convert
    from embodied_ros.models.smolvla.runtime import load_runtime

    record = args.record
    if not (record / "cases.npz").is_file():
        subprocess.run([common.reference_python(), str(args.generator), str(HERE / "specs" / "smolvla_small.json"),
                        str(record)], check=True, env=common.reference_environment(), capture_output=True)
    bundle_path = args.workdir / "smolvla_small.gguf"
    convert(record, bundle_path, "f32")
    rss_numpy = common.current_rss_mb()
    runtime = load_runtime(open_bundle(bundle_path, architecture="smolvla"))
    model = runtime.model
    cases = np.load(record / "cases.npz")
    inputs = (cases["case0_images"] * np.float32(2) - np.float32(1), cases["case0_image_masks"], cases["case0_tokens"],
              cases["case0_token_mask"], cases["case0_state"], cases["case0_noise"])
    ours, theirs, torch_peak, torch_error, error = [], [], None, None, None
    for _ in range(args.rounds):
        time_chunk(model, *inputs)
        for _ in range(args.repeats):
            times, actions = time_chunk(model, *inputs)
            ours.append(times)
        error = float(np.abs(actions[:, :cases["case0_actions"].shape[1]] - cases["case0_actions"]).max())
        proc = subprocess.run([common.reference_python(), str(HERE / "torch_smolvla_policy.py"), str(record),
                               "--repeats", str(args.repeats), "--threads", str(args.threads)],
                              capture_output=True, text=True, env=common.reference_environment(), check=True)
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        theirs += result["runs"]
        torch_peak, torch_error = result["peak_rss_mb"], result["max_abs_err"]
    rows = summary_rows(ours, theirs)
    total = rows[-1]
    config = json.loads((record / "config.json").read_text())
    vision, text = config["vision"], config["text_model"]
    body = "\n".join([
        f"smolvla_small (benchmarks/specs/smolvla_small.json: 3 cameras {vision['image_size']} px, patch "
        f"{vision['patch_size']}, pixel shuffle {config['connector']['scale_factor']} -> "
        f"{config['connector']['tokens_per_image']} tokens each; vision {vision['width']} x {vision['depth']}; text "
        f"{text['width']} x {config['num_vlm_layers']} ({text['num_heads']} heads, {text['num_kv_heads']} kv heads, "
        f"mlp {text['mlp_dim']}); expert {config['expert']['width']} x {config['num_expert_layers']}, cross-attention "
        f"every 2nd layer; prefix {config['cases'][0]['prefix_len']} rows; chunk {config['chunk_size']}, "
        f"{config['num_steps']} Euler steps), case 0, F32 bundle, {args.threads} threads. {args.rounds} rounds of "
        f"{args.repeats} runs per side, alternating; PyTorch is LeRobot's SmolVLAPolicy.predict_action_chunk, "
        "eager float32, in its own process (vision = its embed_prefix, which also embeds the language tokens; "
        "prefix = the VLM pass that fills the KV cache; solver = the 10 denoise steps)."
        + common.runtime_products_note(),
        "",
        common.markdown_table(rows),
        "",
        f"Chunk: PyTorch / ours = {total['PyTorch / ours (median)']:.2f}x on medians, "
        f"{total['PyTorch / ours (best)']:.2f}x on best runs (target >= 2x).",
        "",
        f"Memory: peak RSS of this process {common.peak_rss_mb():.0f} MiB ({rss_numpy:.0f} MiB before the runtime "
        f"was loaded; weights {os.path.getsize(bundle_path) / 2**20:.1f} MiB, memory-mapped); PyTorch process "
        f"{torch_peak:.0f} MiB.",
        f"Max abs action error vs the record, case 0: ours {error:.2e}, PyTorch policy {torch_error:.2e}.",
        "",
        "Runs (ms), total chunk: ours " + ", ".join(f"{run['total chunk']:.1f}" for run in ours) + "; PyTorch "
        + ", ".join(f"{run['total chunk']:.1f}" for run in theirs) + "."])
    return "smolvla_small", body


def full_size_config():
    from embodied_ros.backbone.llama import LlamaConfig
    from embodied_ros.backbone.smolvlm import SmolVLMVisionConfig
    from embodied_ros.models.smolvla.config import SmolVLAConfig, expert_mlp_dim

    lm = LlamaConfig(960, 16, 2560, 15, 5, 64)
    expert = LlamaConfig(720, 16, expert_mlp_dim(720), 15, 5, 64)
    return SmolVLAConfig(vision=SmolVLMVisionConfig(512, 16, 768, 12, 3072, 12, 4), lm=lm, expert=expert,
                         vocab_size=49280, camera_names=("camera1", "camera2", "camera3"),
                         state_names=tuple(f"state_{i}" for i in range(6)),
                         action_names=tuple(f"action_{i}" for i in range(6)), chunk_size=50, tokenizer_max_length=48)


def write_random_bundle(config, path: Path, quant: str) -> None:
    """Random weights of `config`, each encoded as it is drawn (memory stays one tensor wide)."""
    import numpy as np

    from embodied_ros.bundle import BundleWriter, QuantPlan, RobotMetadata, quantize
    from embodied_ros.models.smolvla.weights import expected_shapes, tensor_group

    plan = QuantPlan.parse(quant)
    model, solver, robot = config.bundle_sections()
    writer = BundleWriter("smolvla", plan, group_of=tensor_group)
    writer.set_config(model)
    writer.set_solver(solver)
    writer.set_robot(RobotMetadata(**robot))
    rng = np.random.default_rng(0)
    for name, shape in expected_shapes(config).items():
        if len(shape) == 2:
            weight = rng.standard_normal(shape, dtype=np.float32) * np.float32(shape[1] ** -0.5)
            choice = plan.choose(tensor_group(name), shape)
            writer.add_weight(name, quantize(weight, choice.qtype), choice.qtype)
        else:
            base = 1.0 if name.endswith(("norm.weight", "ln1.weight", "ln2.weight", "post_ln.weight")) else 0.0
            writer.add_weight(name, base + 0.1 * rng.standard_normal(shape, dtype=np.float32), "f32")
    writer.write(path)


def part_full(args) -> tuple[str, str]:
    import numpy as np

    from embodied_ros.bundle import open_bundle
    from embodied_ros.models.smolvla.runtime import load_runtime

    config = full_size_config()
    bundle_path = args.workdir / "smolvla_full_size_q8_0.gguf"
    bundle_existed = bundle_path.is_file()
    if not bundle_existed:
        write_random_bundle(config, bundle_path, "default=q8_0")
    rss_before = common.current_rss_mb()
    start = time.perf_counter()
    runtime = load_runtime(open_bundle(bundle_path, architecture="smolvla"))
    load_s = time.perf_counter() - start
    model = runtime.model
    rng = np.random.default_rng(1)
    size = config.vision.image_size
    inputs = (rng.uniform(-1, 1, (3, 3, size, size)).astype(np.float32), np.ones(3, bool),
              rng.integers(0, config.vocab_size, config.tokenizer_max_length),
              np.ones(config.tokenizer_max_length, bool),
              rng.standard_normal(config.state_dim).astype(np.float32),
              rng.standard_normal((config.chunk_size, config.max_action_dim)).astype(np.float32))
    time_chunk(model, *inputs)
    runs = [time_chunk(model, *inputs)[0] for _ in range(args.repeats)]
    rows = summary_rows(runs, None)
    prefix_rows = 3 * config.vision.tokens_per_image + config.tokenizer_max_length + 1
    body = "\n".join([
        "SmolVLA at its released size (lerobot/smolvla_base dimensions), random weights: SigLIP-style vision "
        "768 x 12 (12 heads, mlp 3072) at 512 px, patch 16 (1024 patches), pixel shuffle 4 -> 64 tokens per "
        "camera, connector 12288 -> 960; the 16 kept SmolLM2 layers (960 wide, 15 heads / 5 kv heads of 64, mlp "
        "2560, vocab 49280); the expert 720 wide x 16 (mlp 2048), cross-attention every 2nd layer. 3 cameras, "
        f"48 valid tokens + state -> prefix {prefix_rows} rows; chunk 50, 10 Euler steps; batch 1, {args.threads} "
        f"threads. Weights Q8_0 where the row length is a multiple of 32, else F32 (the expert's 720-wide "
        f"inputs); bundle {os.path.getsize(bundle_path) / 2**20:.0f} MiB. {args.repeats} runs after one untimed "
        "chunk; this runtime only (the PyTorch policy at this size does not fit beside it in this machine's "
        "memory budget)." + common.runtime_products_note(),
        "",
        common.markdown_table(rows),
        "",
        f"Memory: peak RSS {common.peak_rss_mb():.0f} MiB ({rss_before:.0f} MiB before the runtime was loaded"
        + ("" if bundle_existed else ", after writing the bundle in this process") + "); "
        f"load + warm-up {load_s:.1f} s.",
        "",
        "Runs (ms), total chunk: " + ", ".join(f"{run['total chunk']:.0f}" for run in runs) + "."])
    return "smolvla_full_size", body


def load_note(compared: bool) -> str:
    """A sentence when other processes competed for the cores during the run."""
    load, cpus = os.getloadavg()[0], len(os.sched_getaffinity(0))
    if load <= cpus:
        return ""
    return (f"\n\nLoad average {load:.1f} on {cpus} CPUs when this section was written: "
            "other processes shared the cores, "
            "so absolute times are inflated and vary run to run"
            + (", and the ratio is less certain than on an idle machine." if compared else "."))


def main(argv=None) -> int:
    args = parse_args(argv)
    set_threads(args.threads)
    args.workdir.mkdir(parents=True, exist_ok=True)
    machine = common.machine_line()
    parts = {"small": part_small, "full": part_full}
    for part in args.parts.split(","):
        name, body = parts[part](args)
        body += load_note(compared=part == "small")
        if args.no_write:
            print(f"## {name}\n\nMachine: {machine}\n\n{body}\n")
        else:
            common.write_section(common.REPO_ROOT / "BENCHMARKS.md", name, body, command=common.command_line(),
                                 machine=machine)
            print(f"wrote section {name} of BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
