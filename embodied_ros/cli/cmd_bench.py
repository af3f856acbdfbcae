"""`embodied-ros bench BUNDLE [--record DIR] [--repeats N]`: how fast, how large, how exact.

Loads the bundle as a node would (memory check, weights packed, kernels compiled), runs every
recorded case `--repeats` times (the record folder's cases, else the bundle's reference record),
and prints the median time of each stage, each case's median chunk and error, the median chunk,
the peak resident memory of the process and the max abs action error against the record; the
last line is

    chunk_ms=<median> max_abs_err=<value> peak_rss_mb=<value>

The first run of each case is a warm-up and is not timed. A model family takes part by exposing
`bench_cases(bundle, record, backend)` (embodied_ros/models/kit/bench.py); the flow-matching families
and GR00T also read record folders, the others their bundle's own reference record. A world-action
model's case is an episode: its time is divided by the chunks it samples.
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

import numpy as np

HELP = "time a bundle's stages on recorded cases; prints chunk_ms, max_abs_err and peak_rss_mb"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="bundle file (.gguf)")
    parser.add_argument("--record", type=Path, default=None,
                        help="reference record folder to run (default: the bundle's own reference record)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each case (default 3)")
    parser.add_argument("--backend", choices=("numpy", "numba"), default="numba", help="kernel backend (default numba)")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run(args) -> int:
    from embodied_ros.bundle import BundleError, open_bundle
    from embodied_ros.bundle.families import family
    from embodied_ros.pipeline.stages import check_bundle_fits

    if args.repeats < 1:
        print(f"bench: --repeats must be at least 1, got {args.repeats}", file=sys.stderr)
        return 2
    try:
        bundle = open_bundle(args.bundle)
        bench_cases = getattr(family(bundle.architecture), "bench_cases", None)
        if bench_cases is None:
            print(f"bench: {args.bundle}: no bench for {bundle.architecture!r} bundles", file=sys.stderr)
            return 2
        check_bundle_fits(bundle)  # refused in one line where it cannot fit
        cases = bench_cases(bundle, args.record, args.backend)
    except (BundleError, ValueError, OSError) as problem:
        print(f"bench: {problem}", file=sys.stderr)
        return 2
    if not cases:
        print("bench: the record holds no cases", file=sys.stderr)
        return 2
    stage_seconds: dict[str, list[float]] = {}
    chunks, per_case, worst = [], [], 0.0
    for case in cases:
        case.run()  # warm-up: first touches of buffers and caches
        case_chunks, case_worst = [], 0.0
        for _ in range(args.repeats):
            seconds, error = case.run()
            for stage, value in seconds.items():
                stage_seconds.setdefault(stage, []).append(value)
            case_chunks.append(sum(seconds.values()) / case.chunks)
            case_worst = max(case_worst, error)
        chunks += case_chunks
        worst = max(worst, case_worst)
        per_case.append((case, np.median(case_chunks), case_worst))
    for stage, values in stage_seconds.items():
        print(f"{stage}: median {np.median(values) * 1e3:.1f} ms (min {min(values) * 1e3:.1f}, "
              f"max {max(values) * 1e3:.1f})")
    for case, median_s, error in per_case:
        of = f" ({case.chunks} chunks a run)" if case.chunks > 1 else ""
        print(f"{case.name}: chunk median {median_s * 1e3:.1f} ms{of}, max abs error {error:.4g}")
    print(f"{len(cases)} cases x {args.repeats} repeats, weights {bundle.weight_bytes / 2**20:.1f} MiB "
          f"({bundle.quant_plan or 'f32'})")
    print(f"chunk_ms={np.median(chunks) * 1e3:.1f} max_abs_err={worst:.4g} peak_rss_mb={peak_rss_mb():.0f}")
    return 0
