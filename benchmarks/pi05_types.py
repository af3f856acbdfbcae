"""pi05_small end to end for each stored type, with `embodied-ros bench`, next to PyTorch f32.

    python benchmarks/pi05_small_types.py [--repeats 3] [--threads 2] [--workdir /tmp/pi05_small_types]

Converts test/data/pi05_small once per stored type (F32, F16, BF16, Q8_0, Q4_K), runs
`embodied-ros bench BUNDLE --record test/data/pi05_small` on each in its own process (per-stage
medians, peak RSS, max abs action error against the record), then LeRobot's PI05Policy in float32
(torch_reference.py pi05_small; its record error is its own), all in one run. Writes BENCHMARKS.md
section pi05_small_types.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import common

TYPES = ("f32", "f16", "bf16", "q8_0", "q4_k")
RECORD = common.REPO_ROOT / "test" / "data" / "pi05_small"


def cli(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "embodied_ros.cli.main", *args], check=True, capture_output=True,
                          text=True).stdout


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/pi05_small_types"))
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[variable] = str(args.threads)
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for qtype in TYPES:
        bundle = args.workdir / f"pi05_small_{qtype}.gguf"
        if not bundle.is_file():
            cli("bundle", "convert", str(RECORD), str(bundle), "--quant", qtype, "--no-progress")
        out = cli("bench", str(bundle), "--record", str(RECORD), "--repeats", str(args.repeats))
        stages = dict(re.findall(r"^(\w+): median ([\d.]+) ms", out, re.M))
        last = re.search(r"chunk_ms=([\d.]+) max_abs_err=(\S+) peak_rss_mb=(\d+)", out)
        rows.append({"implementation": "embodied_ros", "weights": qtype.upper(),
                     "bundle MiB": bundle.stat().st_size / 2**20, "chunk ms (median)": float(last[1]),
                     **{f"{stage} ms": float(value) for stage, value in stages.items()},
                     "max abs action error": float(last[2]), "peak RSS MiB": int(last[3])})
    if not args.no_torch:
        result = common.run_torch_reference("pi05_small", repeats=args.repeats, warmup=1, threads=args.threads)
        total = next(m for m in result["measurements"] if m["name"] == "total")
        rows.append({"implementation": "PyTorch (LeRobot PI05Policy)", "weights": "F32",
                     "chunk ms (median)": total["median_ms"],
                     "max abs action error": result.get("max_abs_err_vs_record"),
                     "peak RSS MiB": result.get("memory", {}).get("peak_rss_mb")})
        torch_ms = total["median_ms"]
        for row in rows[:-1]:
            row["PyTorch f32 / this"] = torch_ms / row["chunk ms (median)"]
    columns = ["implementation", "weights", "bundle MiB", "chunk ms (median)", "PyTorch f32 / this", "perception ms",
               "prefix ms", "action ms", "max abs action error", "peak RSS MiB"]
    body = "\n".join([
        f"test/data/pi05_small (3 cases), `embodied-ros bench --repeats {args.repeats}` per stored type, each in its "
        f"own process, {args.threads} threads; then PyTorch f32 on case 0 in its own process, in the same run. "
        "The machine is shared with other work while this runs (load average in the Machine line, on 2 cores): "
        "read the ratios within the run, and not the PyTorch ones as they would be on a quiet machine: its "
        "OpenMP pool loses far more than this runtime's to an oversubscribed CPU (pi05_small section above: "
        "3x on a quiet one).",
        "", common.markdown_table(rows, columns)])
    print(body)
    if not args.no_write:
        common.write_section(common.REPO_ROOT / "BENCHMARKS.md", "pi05_small_types", body,
                             command="python benchmarks/pi05_small_types.py " + " ".join(argv or sys.argv[1:]),
                             machine=common.machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
