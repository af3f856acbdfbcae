"""HY-VLA on this runtime next to HY-VLA's own PyTorch code, at a small configuration.

    python benchmarks/bench_hy_vla.py [--repeats 5] [--threads 2] [--workdir DIR] [--json FILE] [--no-write]

A random-weight HY-VLA of SMALL_SPEC (HYViT2 384 x 6 at 224 px, 3 cameras of 7 x 7 image tokens; MoT LM
1024 x 8, 8 / 2 heads of 128, mlp 3072; expert 512, mlp 1024; chunk 50, 10 Euler steps; a 48-token prompt)
is made twice by HY-VLA's code (reference/hy_vla/gen_records.py): in float32 (its bf16 casts as float32)
and in bfloat16 as its evaluation runs it; each run also times `forward_evaluate` (median of --repeats).
This runtime converts each checkpoint (F32 from the float32 one, F32 and BF16 from the bf16 one) and
times the same cases through the model (image tokens, prefix, solve: the reference's call), median of
--repeats after a warm-up; its actions are compared to the record of the same precision.

Needs the reference environment (reference/hy_vla/install.sh): its interpreter in
$EMBODIED_ROS_HY_VLA_PYTHON and the HY-VLA checkout in $HY_VLA_SOURCE. Writes the section hy_vla_small
of BENCHMARKS.md unless --no-write.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GENERATOR = REPO / "reference" / "hy_vla" / "gen_records.py"
PYTHON_ENV, SOURCE_ENV = "EMBODIED_ROS_HY_VLA_PYTHON", "HY_VLA_SOURCE"
SMALL_SPEC = {
    "name": "hy_vla_bench_small",
    "vision": {"width": 384, "layers": 6, "heads": 6, "mlp_ratio": 4.0, "patch_size": 16, "position_grid": 32},
    "text": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 8, "num_attention_heads": 8,
             "num_key_value_heads": 2, "head_dim": 128, "attention_head_dim": 128, "vocab_size": 4096,
             "org_vocab_size": 4096},
    "expert": {"width": 512, "mlp": 1024},
    "policy": {"chunk_size": 50, "n_action_steps": 50, "max_state_dim": 32, "max_action_dim": 32,
               "tokenizer_max_length": 48, "resize_imgs_with_padding": [224, 224], "empty_cameras": 0},
    "cases": [{"task": "place the empty cup on the coaster", "image_hw": [240, 320]},
              {"task": "open the drawer and put the red block inside it", "image_hw": [240, 320]}],
}


def make_record(folder: Path, precision: str, args) -> dict:
    python, source = os.environ.get(PYTHON_ENV), os.environ.get(SOURCE_ENV)
    if not python or not source:
        raise SystemExit(f"set ${PYTHON_ENV} (reference/hy_vla/install.sh) and ${SOURCE_ENV} (an HY-VLA checkout)")
    spec = folder.parent / f"{folder.name}.json"
    spec.write_text(json.dumps(SMALL_SPEC))
    subprocess.run([python, str(GENERATOR), str(spec), str(folder), "--source", source, "--precision", precision,
                    "--threads", str(args.threads), "--time", str(args.repeats)], check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads((folder / "cases.json").read_text())


def runtime_side(folder: Path, quant: str, args) -> tuple[float, float]:
    """(median ms of a case through this runtime's model, max abs action error against the record)."""
    from embodied_ros.bundle import open_bundle
    from embodied_ros.models.hy_vla import convert
    from embodied_ros.models.hy_vla.parity import model_case
    from embodied_ros.models.hy_vla.runtime import load_runtime

    bundle_path = args.workdir / f"{folder.name}_{quant}.gguf"
    convert.convert(folder, bundle_path, quant)
    model = load_runtime(open_bundle(bundle_path), "numba").model
    times, errors = [], []
    with np.load(folder / "cases.npz") as cases:
        keys = sorted({name.split("_")[0] for name in cases.files if name.endswith("_normalized_actions")})
        model_case(model, cases, keys[0])  # compiles every kernel
        for key in keys:
            for _ in range(args.repeats):
                start = time.perf_counter()
                actions = model_case(model, cases, key)
                times.append(1e3 * (time.perf_counter() - start))
            errors.append(float(np.abs(actions - cases[f"{key}_normalized_actions"]).max()))
    return statistics.median(times), max(errors)


def small_part(args, report: dict) -> str:
    rows = []
    reference_ms = {}
    for precision in ("float32", "bfloat16"):
        folder = args.workdir / f"small_{precision}"
        notes = make_record(folder, precision, args)
        reference_ms[precision] = 1e3 * statistics.median(case["reference_seconds"] for case in notes["cases"])
        rows.append({"side": f"HY-VLA PyTorch, {precision} (torch, {args.threads} threads)",
                     "chunk ms": reference_ms[precision], "action error": "(the record)"})
        for quant in (("f32",) if precision == "float32" else ("f32", "bf16")):
            ms, error = runtime_side(folder, quant, args)
            rows.append({"side": f"this runtime, {quant.upper()} bundle of the {precision} checkpoint", "chunk ms": ms,
                         "action error": error,
                         "vs PyTorch float32": reference_ms["float32"] / ms,
                         "vs PyTorch bfloat16": reference_ms["bfloat16"] / ms if precision == "bfloat16" else ""})
    report["small"] = rows
    return (f"Small config: HYViT2 384 x 6 at 224 px (3 cameras, 49 image tokens each), MoT LM 1024 x 8 (8 / 2 heads "
            f"of 128, mlp 3072), expert 512 (mlp 1024), chunk 50, 10 Euler steps, 48 prompt tokens; a chunk is "
            f"`forward_evaluate` on the PyTorch side and image tokens + prefix + solve here; median of {args.repeats} "
            f"per case, 2 cases. Action error: max abs normalized-action difference to the record of the same "
            f"precision (a bf16 record's own rounding is ~1e-2).\n\n"
            + common.markdown_table(rows, ["side", "chunk ms", "action error", "vs PyTorch float32",
                                           "vs PyTorch bfloat16"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="numba and torch threads")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--no-write", action="store_true", help="leave BENCHMARKS.md as it is")
    common.add_workdir_argument(parser, "hy_vla")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    import numba
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    print(f"# hy_vla benchmark\n\nMachine: {common.machine_line()}\n")
    report = {"machine": common.machine_description(), "cpu_features": common.cpu_features()}
    body = small_part(args, report)
    print(f"## small\n\n{body}\n", flush=True)
    if not args.no_write:
        common.write_section(common.REPO_ROOT / "BENCHMARKS.md", "hy_vla_small", body, command=common.command_line(),
                             machine=common.machine_line())
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
