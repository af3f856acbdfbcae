#!/usr/bin/env python
"""Rewrites the Python 3.12 type-parameter syntax (PEP 695) in LeRobot 0.6.1 into its Python 3.11
form, so that LeRobot imports on the reference environment's Python 3.11. Five modules use it:

    datasets/aggregate.py, motors/motors_bus.py   `type X = ...` aliases      -> plain assignments
    datasets/streaming_dataset.py                 class Backtrackable[T]       -> typing.Generic[T]
    processor/pipeline.py                         dataclass DataProcessorPipeline[TInput, TOutput]
                                                  (its TypeVars exist already) -> typing.Generic[...]
    utils/io_utils.py                             def deserialize_json_into_object[T: JsonLike]
                                                  -> a module-level typing.TypeVar

    python py311_fixes.py [--lerobot DIR] [--dry-run]

DIR: the `lerobot` package folder (default: the one this interpreter imports... without importing
it, which fails on 3.11 before the fixes). Running it again changes nothing. Without --dry-run the
package is byte-compiled afterwards; with it, nothing is written and every rewritten module is only
compiled in memory. The pi0.5 / pi0 / SmolVLA / GR00T / LingBot-VA modeling code needs no change.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import re
import sys
from pathlib import Path

ALIAS = (re.compile(r"^type (\w+) = ", re.M), r"\1 = ")
FIXES = {
    "datasets/aggregate.py": [ALIAS],
    "motors/motors_bus.py": [ALIAS],
    "datasets/streaming_dataset.py": [
        (re.compile(r"^class Backtrackable\[T\]:", re.M),
         'import typing as _py311_typing\n\nT = _py311_typing.TypeVar("T")\n\n\n'
         "class Backtrackable(_py311_typing.Generic[T]):")],
    "processor/pipeline.py": [
        (re.compile(r"^class DataProcessorPipeline\[TInput, TOutput\]\(HubMixin\):", re.M),
         "import typing as _py311_typing\n\n\n@dataclass\n"
         "class DataProcessorPipeline(HubMixin, _py311_typing.Generic[TInput, TOutput]):"),
        # the decorator line above the class moved below the inserted import
        (re.compile(r"^@dataclass\n(import typing as _py311_typing\n)", re.M), r"\1")],
    "utils/io_utils.py": [
        (re.compile(r"^def deserialize_json_into_object\[T: JsonLike\]\(", re.M),
         'import typing as _py311_typing\n\nT = _py311_typing.TypeVar("T")  # bound: JsonLike\n\n\n'
         "def deserialize_json_into_object(")],
}
PEP_695 = re.compile(r"^(type \w+ = |class \w+\[[^\]]*\]|def \w+\[[^\]]*\]\()", re.M)


def lerobot_folder() -> Path:
    spec = importlib.util.find_spec("lerobot")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("lerobot is not installed for this interpreter; name its folder with --lerobot")
    return Path(list(spec.submodule_search_locations)[0])


def rewritten(text: str, fixes) -> str:
    for pattern, replacement in fixes:
        text = pattern.sub(replacement, text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lerobot", type=Path, help="the lerobot package folder (default: the installed one)")
    parser.add_argument("--dry-run", action="store_true", help="report and compile in memory; write nothing")
    args = parser.parse_args()
    root = args.lerobot or lerobot_folder()
    failed = False
    for relative, fixes in FIXES.items():
        path = root / relative
        before = path.read_text()
        after = rewritten(before, fixes)
        assert rewritten(after, fixes) == after, f"{relative}: the rewrite is not idempotent"
        left = PEP_695.findall(after)
        try:
            compile(after, str(path), "exec")
            compiles = "compiles"
        except SyntaxError as error:
            compiles, failed = f"DOES NOT COMPILE: {error}", True
        state = "already in 3.11 form" if after == before else f"{'would rewrite' if args.dry_run else 'rewritten'}"
        print(f"{relative}: {state}; {compiles} on Python {sys.version.split()[0]}"
              + (f"; PEP 695 syntax left: {left}" if left else ""))
        failed |= bool(left)
        if after != before and not args.dry_run:
            path.write_text(after)
    if not args.dry_run:
        failed |= not compileall.compile_dir(str(root), quiet=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
