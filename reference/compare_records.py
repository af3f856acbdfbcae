#!/usr/bin/env python
"""Compares a regenerated record with a shipped one: which files are byte-identical, the arrays of
every .npz and .safetensors file (names, shapes, dtypes, max abs difference) and the keys and values
of every JSON file (prose and version strings are reported, not judged).

    python compare_records.py NEW_RECORD SHIPPED_RECORD [--ignore KEY ...]

Needs numpy (and safetensors to look inside weight files); runs in either environment.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def arrays_of(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".npz":
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    from safetensors.numpy import load_file
    return load_file(str(path))


def compare_arrays(new: dict, old: dict) -> list[str]:
    lines, worst = [], 0.0
    for key in sorted(set(new) | set(old)):
        if key not in new or key not in old:
            lines.append(f"    {key}: only in {'new' if key in new else 'shipped'}")
            continue
        a, b = new[key], old[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            lines.append(f"    {key}: {a.dtype}{a.shape} vs shipped {b.dtype}{b.shape}")
            continue
        if a.dtype.kind in "fc":
            diff = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0
        else:
            diff = float(np.count_nonzero(a != b))
        if diff:
            lines.append(f"    {key}: max abs difference {diff:.3g}")
        worst = max(worst, diff)
    lines.append(f"    {len(new)} arrays, names/shapes/dtypes {'equal' if not any('vs shipped' in x or 'only in' in x for x in lines) else 'DIFFER'}, "
                 f"largest difference {worst:.3g}")
    return lines


def flatten(value, prefix=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            yield from flatten(v, f"{prefix}[{i}]")
    else:
        yield prefix, value


def compare_json(new, old, ignore: set[str]) -> list[str]:
    a, b = dict(flatten(new)), dict(flatten(old))
    lines = []
    for key in sorted(set(a) | set(b)):
        if any(part in ignore for part in key.replace("[", ".").split(".")):
            continue
        if key not in a or key not in b:
            lines.append(f"    {key}: only in {'new' if key in a else 'shipped'}")
        elif a[key] != b[key]:
            if isinstance(a[key], float) and isinstance(b[key], float) and abs(a[key] - b[key]) <= 1e-5 * max(1, abs(b[key])):
                continue
            lines.append(f"    {key}: {str(a[key])[:90]!s} | shipped {str(b[key])[:90]!s}")
    return lines or ["    same keys and values"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("new", type=Path)
    parser.add_argument("shipped", type=Path)
    parser.add_argument("--ignore", nargs="*", default=["generated_by", "verification"],
                        help="JSON keys to leave out (default: generated_by verification)")
    args = parser.parse_args()
    files = sorted({p.relative_to(args.new) for p in args.new.rglob("*") if p.is_file()}
                   | {p.relative_to(args.shipped) for p in args.shipped.rglob("*") if p.is_file()})
    for rel in files:
        a, b = args.new / rel, args.shipped / rel
        if not a.exists() or not b.exists():
            print(f"{rel}: only in {'new' if a.exists() else 'shipped'}")
            continue
        same = digest(a) == digest(b)
        print(f"{rel}: {'byte-identical' if same else 'differs'}")
        if same:
            continue
        if rel.suffix in (".npz", ".safetensors"):
            try:
                print("\n".join(compare_arrays(arrays_of(a), arrays_of(b))))
            except ImportError:
                print("    (safetensors not installed: not opened)")
        elif rel.suffix == ".json":
            print("\n".join(compare_json(json.loads(a.read_text()), json.loads(b.read_text()), set(args.ignore))))


if __name__ == "__main__":
    main()
