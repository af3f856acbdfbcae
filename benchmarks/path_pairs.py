"""Bundles, or one bundle under other product paths, timed chunk by chunk in one process, the sides
in a new random order each round, so that each round's ratios compare runs seconds apart.

    python benchmarks/path_pairs.py SIDE [SIDE ...] [--record DIR] [--case 0] [--rounds 12] [--threads 2]
                                    [--load BUSY/PERIOD] [--section NAME]

A SIDE is a bundle, optionally with settings of the product paths after '@', for example
`smolvla_f32.gguf@share_rows=1`: `share_rows` is kernels/cpu/blas.py's SHARE_MIN_ROWS (from it a
float32 BLAS product runs as shares on single-threaded BLAS instead of on BLAS's own threads), `inf`
for no limit; `shares_per_thread` is kernels/cpu/shares.py's SHARES_PER_THREAD (1: every parallel
region in equal parts, one per thread). Each side runs the record's case (default: each bundle's own reference record) as
`embodied-ros bench` does (the family's bench cases), after two untimed runs. The first side is the
baseline: each row gives the median over rounds of the baseline's time over that side's, per stage
and for the chunk.
On a machine whose speed moves by tens of percent within minutes, those per-round ratios hold
where medians of runs minutes apart do not. `--load 4/12` runs the sides as the stages run in
`embodied-ros up`: beside a process busy 4 ms of every 12 ms (what the synthetic robot, the
controller and the middleware take there), this process at the stages' lower priority.
"""
from __future__ import annotations

import argparse
import importlib
import os
import random
import sys
from pathlib import Path

import common

KNOBS = {"share_rows": ("embodied_ros.kernels.cpu.blas", "SHARE_MIN_ROWS"),
         "shares_per_thread": ("embodied_ros.kernels.cpu.shares", "SHARES_PER_THREAD")}


def parse_side(text: str) -> tuple[str, dict[str, int]]:
    path, _, settings = text.partition("@")
    knobs = {}
    for item in filter(None, settings.split(",")):
        name, sep, value = item.partition("=")
        if not sep or name not in KNOBS:
            raise SystemExit(f"path_pairs: {item!r}: settings are {', '.join(f'{k}=N' for k in KNOBS)} (N or inf)")
        knobs[name] = 1 << 62 if value == "inf" else int(value)
    return path, knobs


def apply(knobs: dict[str, int], defaults: dict[str, int]) -> None:
    """The settings of one side; the module's own value for every setting it does not name."""
    for name, (module, attribute) in KNOBS.items():
        setattr(importlib.import_module(module), attribute, knobs.get(name, defaults[name]))


def ratio_rows(runs: dict[str, list[dict]], labels: dict[str, str], column: str) -> list[dict]:
    """The table's rows: per side (the first is the baseline), its median ms per stage and the median
    over rounds of the baseline's time over its own, the chunk ratio's quartiles, the rounds it was
    faster in, and its largest action error. runs: side -> one dict per round, stage -> ms and
    "error"."""
    import numpy as np

    baseline = next(iter(runs))
    stages = [key for key in runs[baseline][0] if key != "error"]
    rows = []
    for side, timed in runs.items():
        row = {column: labels[side]}
        ratios = {}
        for stage in stages:
            own = np.array([run[stage] for run in timed])
            ratios[stage] = np.array([run[stage] for run in runs[baseline]]) / own
            row[f"{stage} ms"] = float(np.median(own))
            row[f"{stage}: baseline / this"] = float(np.median(ratios[stage]))
        ratio = ratios["chunk"]
        first = side == baseline
        row["chunk ratio quartiles"] = "" if first else f"{np.percentile(ratio, 25):.3f}-{np.percentile(ratio, 75):.3f}"
        row["rounds this is faster"] = "" if first else f"{int((ratio > 1).sum())}/{len(ratio)}"
        row["max abs action error"] = max(run["error"] for run in timed)
        rows.append(row)
    return rows


def print_section(section: str | None, body: str) -> None:
    """Print the table and its words; with a section name, write them into BENCHMARKS.md too."""
    print(body)
    if section:
        common.write_section(common.BENCHMARKS_MD, section, body, common.command_line(), common.machine_line())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sides", nargs="+", help="BUNDLE[@setting=N,...]; the first is the baseline")
    parser.add_argument("--record", type=Path, help="a record folder of the bundles' family (default: their own)")
    parser.add_argument("--case", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    common.add_load_argument(parser, "this one")
    parser.add_argument("--section", help="write this BENCHMARKS.md section (default: print only)")
    args = parser.parse_args(argv)
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[variable] = str(args.threads)
    with common.load_beside(args.load):
        if args.load:
            os.nice(common.STAGE_NICE)  # before any thread starts: BLAS's and the kernels' inherit it
        return _run(args)


def _run(args) -> int:

    from embodied_ros.bundle import open_bundle
    from embodied_ros.bundle.families import family

    defaults = {name: getattr(importlib.import_module(module), attribute)
                for name, (module, attribute) in KNOBS.items()}
    cases, knobs = {}, {}
    for text in args.sides:
        path, settings = parse_side(text)
        if path not in cases:
            bundle = open_bundle(path)
            cases[path] = family(bundle.architecture).bench_cases(bundle, args.record, "numba")[args.case]
        knobs[text] = (path, settings)
    runs = {side: [] for side in args.sides}
    for side, (path, settings) in knobs.items():
        apply(settings, defaults)
        for _ in range(2):
            cases[path].run()
    for _ in range(args.rounds):
        for side in random.sample(args.sides, len(args.sides)):
            path, settings = knobs[side]
            apply(settings, defaults)
            seconds, error = cases[path].run()
            runs[side].append({**{k: 1e3 * v for k, v in seconds.items()}, "chunk": 1e3 * sum(seconds.values()),
                               "error": error})
    apply({}, defaults)
    rows = ratio_rows(runs, {side: f"`{Path(knobs[side][0]).name}{side[len(knobs[side][0]):]}`" for side in runs},
                      "side")
    print_section(args.section, "\n".join([
        f"{args.record or 'the reference record of each bundle'}, case {args.case}, {args.threads} threads, "
        f"{args.rounds} rounds of every side in a random order after two untimed runs each, one process; "
        f"ratios are the median over rounds of the baseline's "
        f"time (the first row) over this side's." + common.load_words(args.load, "this one")
        + common.runtime_products_note(), "",
        common.markdown_table(rows)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
