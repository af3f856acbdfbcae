"""`embodied-ros parity FIXTURE_DIR [--quant TYPE]`: does this runtime reproduce a reference record?

Reads a folder of recorded reference runs, converts its checkpoint to a temporary bundle with the
given storage type, runs every recorded case with its recorded noise, prints each case's max
absolute error, then last `max_abs_err=<value>`, and exits 1 when that exceeds the tolerance of
the storage type (f32: 1e-4; the family documents the others), 2 when no family reads the folder.

Model families plug in by name, with no edit here: every package `embodied_ros.models.<family>`
that exposes

    recognizes_fixture(path: Path) -> bool
        cheap: file names and config only; True if the folder is a record of this family
    run_fixture_parity(path: Path, quant: str, backend: str) -> list of case results
        convert the record's weights stored as `quant`, run every case; each result has
        `name` (e.g. "case0"), `max_abs_error` and `tolerance` (and may have `detail`, a string
        saying what else differed)

is asked in name order; the first that recognizes the folder runs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "check a reference record (checkpoint + recorded cases) against this runtime; prints max_abs_err"

QUANT_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_k")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("fixture_dir", type=Path, help="folder of a reference record (e.g. test/data/pi05_tiny)")
    parser.add_argument("--quant", choices=QUANT_TYPES, default="f32",
                        help="store the weights as this type for the run (default f32)")
    parser.add_argument("--backend", choices=("numpy", "numba"), default="numba",
                        help="kernel backend (default numba; numpy is the reference implementation)")


def families() -> list:
    """Every model family package that provides the two parity hooks, in name order (plain modules
    under embodied_ros/models/, shared by the families, are not families)."""
    from embodied_ros.bundle.families import family, known_families

    modules = [family(name) for name in known_families()]
    return [module for module in modules if hasattr(module, "recognizes_fixture") and hasattr(module, "run_fixture_parity")]


def run(args) -> int:
    folder: Path = args.fixture_dir
    if not folder.is_dir():
        print(f"parity: {folder} is not a folder", file=sys.stderr)
        return 2
    family = next((module for module in families() if module.recognizes_fixture(folder)), None)
    if family is None:
        print(f"parity: no model family recognizes {folder} as a reference record", file=sys.stderr)
        return 2
    try:
        results = family.run_fixture_parity(folder, args.quant, backend=args.backend)
    except ValueError as problem:
        print(f"parity: {problem}", file=sys.stderr)
        return 2
    if not results:
        print(f"parity: {folder} holds no cases", file=sys.stderr)
        return 2
    for result in results:
        detail = getattr(result, "detail", "")
        print(f"{result.name}: max_abs_err={result.max_abs_error:.3g}" + (f" ({detail})" if detail else ""))
    error = max(result.max_abs_error for result in results)
    failed = [result.name for result in results if not result.max_abs_error <= result.tolerance]
    tolerance = min(result.tolerance for result in results)
    print(f"{'FAILED: ' + ', '.join(failed) + ' above' if failed else 'within'} tolerance {tolerance:g} ({args.quant})")
    print(f"max_abs_err={error:.6g}")
    return 1 if failed else 0
