"""A pi0.5 or SmolVLA record end to end for each stored type, with `embodied-ros bench`, next to LeRobot.

    python benchmarks/record_types.py [--record DIR] [--types f32,f16,bf16,q8_0,q4_k]
                                      [--torch-dtypes f32,bf16] [--repeats 3] [--threads 2]
                                      [--workdir DIR] [--section NAME]

Converts the record once per stored type (`embodied-ros bundle convert RECORD OUT --quant TYPE`,
its peak resident memory measured), runs `embodied-ros bench BUNDLE --record RECORD` on each in its
own process (per-stage medians over every case, peak RSS, max abs action error against the
record), then LeRobot's policy in each of its dtypes in its own process, all in one run, one
process at a time: pi0.5 records through torch_reference.py pi05_small --dtype (f32, bf16; case 0
timed, every case's error), SmolVLA records through torch_smolvla_policy.py --dtype (f32, deployed:
the VLM in bfloat16 and the expert in float32 as a pretrained save runs, bf16; case 0 timed and
compared). Writes the BENCHMARKS.md section NAME (default: the record folder's name + "_types").
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

TYPES = ("f32", "f16", "bf16", "q8_0", "q4_k")
CASE0 = "case 0 chunk ms (median)"
# Action errors up to this count as the same: LeRobot's float32 policy re-run reproduces its own record
# exactly (error 0), a float32 runtime sums in another order.
FLOAT32_ROUNDING = 1e-5


def pi05_torch_row(args, dtype: str) -> dict:
    result = common.run_torch_reference("pi05_small", repeats=args.repeats, warmup=1, threads=args.threads,
                                        dtype=dtype, record=args.record, timeout_s=7200)
    by_name = {m["name"]: m["median_ms"] for m in result["measurements"]}
    return {"implementation": "PyTorch (LeRobot PI05Policy)", "weights": dtype.upper(),
            CASE0: by_name["total"], "perception ms": by_name["vision"], "prefix ms": by_name["prefix"],
            "action ms": by_name["expert_steps_sum"], "max abs action error": result.get("max_abs_err_vs_record"),
            "peak RSS MiB": result.get("memory", {}).get("peak_rss_mb")}


def smolvla_torch_row(args, dtype: str) -> dict:
    proc = subprocess.run([common.reference_python(), str(Path(__file__).parent / "torch_smolvla_policy.py"),
                           str(args.record), "--repeats", str(args.repeats), "--threads", str(args.threads),
                           "--dtype", dtype], capture_output=True, text=True, env=common.reference_environment(),
                          timeout=7200)
    if proc.returncode:
        return {"implementation": "PyTorch (LeRobot SmolVLAPolicy)", "weights": dtype.upper(),
                "note": f"did not run: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    median = {stage: statistics.median(run[stage] for run in result["runs"]) for stage in result["runs"][0]}
    return {"implementation": "PyTorch (LeRobot SmolVLAPolicy)", "weights": dtype.upper(), CASE0: median["total chunk"],
            "perception ms": median["vision"], "prefix ms": median["prefix"], "action ms": median["solver"],
            "max abs action error": result["max_abs_err"], "peak RSS MiB": result["peak_rss_mb"]}


TORCH = {"pi05": (("f32", "bf16"), pi05_torch_row), "smolvla": (("f32", "deployed", "bf16"), smolvla_torch_row)}
TORCH_RUNS = {  # what the PyTorch rows are, for the section's text
    "pi05": "LeRobot's PI05Policy.predict_action_chunk per dtype on case 0 ({repeats} timed runs after a warm-up; "
            "its error over every case; its vision tower timed through embed_image, the prefix through the language "
            "model's forward, the action through its denoise steps)",
    "smolvla": "LeRobot's SmolVLAPolicy.predict_action_chunk per dtype on case 0 ({repeats} timed runs after a "
               "warm-up; its error on case 0; perception = its embed_prefix, which also embeds the language tokens, "
               "prefix = the VLM pass, action = the denoise steps; 'deployed' = the VLM in bfloat16 and the expert in "
               "float32, as a pretrained save runs)"}


def run_measured(args: list[str]) -> tuple[str, float, float]:
    """(stdout, peak RSS MiB, wall s) of one command of this package's CLI, in its own process."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "embodied_ros.cli.main", *args], stdout=subprocess.PIPE,
                                stderr=err, text=True)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)  # reaps it, with its own resource usage
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise RuntimeError(f"embodied-ros {' '.join(args)} failed ({proc.returncode}):\n{err.read()[-2000:]}")
    return out, usage.ru_maxrss / 1024, time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, default=common.REPO_ROOT / "test" / "data" / "pi05_small")
    parser.add_argument("--types", default=",".join(TYPES), help=f"stored types, of {', '.join(TYPES)}")
    parser.add_argument("--torch-dtypes", default="f32,bf16",
                        help="LeRobot dtypes to run (pi0.5: f32, bf16; SmolVLA: f32, deployed, bf16), or none")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    common.add_workdir_argument(parser, "pi05_types", "where the bundles are written")
    parser.add_argument("--section", default=None)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    types = [t for t in args.types.split(",") if t]
    torch_dtypes = [] if args.torch_dtypes == "none" else [d for d in args.torch_dtypes.split(",") if d]
    from embodied_ros.bundle.families import detect_family
    family = detect_family(args.record)
    if family not in TORCH:
        parser.error(f"{args.record} is a {family} record; this benchmark reads pi0.5 and SmolVLA records")
    known_dtypes, torch_row = TORCH[family]
    unknown = [t for t in types if t not in TYPES] + [d for d in torch_dtypes if d not in known_dtypes]
    if unknown:
        parser.error(f"unknown type(s) {', '.join(unknown)}")
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[variable] = str(args.threads)
    args.workdir.mkdir(parents=True, exist_ok=True)
    name = args.record.resolve().name
    rows = []
    for qtype in types:
        bundle = args.workdir / f"{name}_{qtype}.gguf"
        convert_peak = convert_s = None
        if not bundle.is_file():
            _, convert_peak, convert_s = run_measured(["bundle", "convert", str(args.record), str(bundle),
                                                       "--quant", qtype, "--no-progress"])
            print(f"{qtype}: converted in {convert_s:.0f} s, peak RSS {convert_peak:.0f} MiB", flush=True)
        out, _, _ = run_measured(["bench", str(bundle), "--record", str(args.record), "--repeats",
                                  str(args.repeats)])
        print(out, flush=True)
        stages = dict(re.findall(r"^(\w+): median ([\d.]+) ms", out, re.M))
        case0 = re.search(r"^case0: chunk median ([\d.]+) ms", out, re.M)
        last = re.search(r"chunk_ms=([\d.]+) max_abs_err=(\S+) peak_rss_mb=(\d+)", out)
        weights = re.search(r"weights ([\d.]+) MiB", out)
        weight_mib = float(weights[1]) if weights else float("nan")
        rows.append({"implementation": "embodied_ros", "weights": qtype.upper(),
                     "bundle MiB": bundle.stat().st_size / 2**20, "weights MiB": weight_mib,
                     "case 0 chunk ms (median)": float(case0[1]), "chunk ms (median)": float(last[1]),
                     **{f"{stage} ms": float(value) for stage, value in stages.items()},
                     "max abs action error": float(last[2]), "peak RSS MiB": int(last[3]),
                     "peak RSS / (1.25 x weights + 1 GiB)": int(last[3]) / (1.25 * weight_mib + 1024),
                     "conversion peak RSS MiB": convert_peak,
                     "conversion peak - bundle MiB": (convert_peak - bundle.stat().st_size / 2**20
                                                      if convert_peak else None),
                     "note": None if convert_peak else f"bundle already in {args.workdir}: not converted in this run"})
    torch_rows = []
    for dtype in torch_dtypes:
        torch_rows.append(torch_row(args, dtype))
        print(torch_rows[-1], flush=True)
    ran = [row for row in torch_rows if CASE0 in row]
    fastest_torch = min(ran, key=lambda r: r[CASE0], default=None)
    for row in rows:
        for other in ran:
            row[f"PyTorch {other['weights'].lower()} / this"] = other[CASE0] / row[CASE0]
    columns = ["implementation", "weights", "bundle MiB", "weights MiB", CASE0, "chunk ms (median)",
               *[f"PyTorch {d} / this" for d in torch_dtypes], "perception ms", "prefix ms", "action ms",
               "max abs action error", "peak RSS MiB", "peak RSS / (1.25 x weights + 1 GiB)",
               "conversion peak RSS MiB", "conversion peak - bundle MiB", "note"]
    lines = [f"{args.record} ({name}), `embodied-ros bench --repeats {args.repeats}` per stored type (every case "
             f"of the record, a warm-up run each), each in its own process, {args.threads} threads; then "
             f"{TORCH_RUNS[family].format(repeats=args.repeats)}, each in its own process, in the same run, one process "
             "at a time. Speed ratios compare case 0 on both sides; 'chunk ms' is this runtime's median over every "
             "case (bench's chunk_ms), 'perception / prefix / action ms' its stage medians over every case. Action "
             "errors are the largest |action - record|, the record being LeRobot's float32 policy."]
    if fastest_torch:
        bar = fastest_torch["max abs action error"]
        eligible = [r for r in rows if r["max abs action error"] <= max(bar, FLOAT32_ROUNDING)]
        best = min(eligible, key=lambda r: r[CASE0], default=None)
        lines.append("")
        lines.append(f"LeRobot's fastest dtype here: {fastest_torch['weights']} "
                     f"({fastest_torch[CASE0] / 1e3:.2f} s a chunk, action error "
                     f"{bar:.3g}). " + (
                         f"Fastest type of this runtime with an action error no worse than that: {best['weights']}, "
                         f"{fastest_torch[CASE0] / best[CASE0]:.2f}x faster on case 0."
                         if best else "No type of this runtime has an action error as small."))
    by_type = {r["weights"]: r for r in rows}
    if "Q8_0" in by_type and "F32" in by_type:
        ratio = by_type["F32"][CASE0] / by_type["Q8_0"][CASE0]
        lines.append(f"Q8_0 vs F32 on case 0: {ratio:.2f}x faster" + (
            f"; vs BF16: {by_type['BF16'][CASE0] / by_type['Q8_0'][CASE0]:.2f}x"
            if "BF16" in by_type else "") + ".")
    body = "\n".join([*lines, "", common.markdown_table(rows + torch_rows, columns)])
    print(body)
    if not args.no_write:
        common.write_section(common.REPO_ROOT / "BENCHMARKS.md", args.section or f"{name}_types", body,
                             command="python benchmarks/record_types.py " + " ".join(argv or sys.argv[1:]),
                             machine=common.machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
