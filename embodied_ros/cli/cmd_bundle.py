"""`embodied-ros bundle {convert,inspect,verify}`: make, read and check model bundles.

convert SOURCE OUT [--quant PLAN] [--reference DIR] [--arch ARCH] [--set KEY=VALUE ...] [--tokenizer FILE]
    The model family whose converter recognizes SOURCE (or --arch) writes the bundle OUT. --set gives
    what the checkpoint cannot tell (head counts at unusual widths, joint names, action period).
    PLAN: "q4_k", or per weight group "vision=f32,lm=q8_0,expert=q4_k" (see bundle/plan.py).
    A bundle written without a tokenizer gets a warning: it verifies, but a graph cannot run it.
inspect BUNDLE [--tensors] [--no-digest]
    Architecture, format, config, weight types and sizes (per group), stats, tokenizer,
    reference record, digest.
verify BUNDLE [--backend numba|numpy] [--integrity-only]
    Checks the structure and digest, then reruns the bundle's reference record through its family.
    Exit status: 0 pass; 1 fail (content changed since writing, reference error above its
    tolerance, or no reference record without --integrity-only); 2 unreadable (not a bundle,
    truncated, forged, unknown family).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "convert a checkpoint to a bundle, inspect a bundle, or verify one against its reference record"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(title="actions", metavar="ACTION", dest="bundle_action", required=True)

    convert = actions.add_parser("convert", help="write a bundle from a model checkpoint")
    convert.add_argument("source", type=Path, help="checkpoint folder (or file) of a supported model family")
    convert.add_argument("output", type=Path, help="bundle file to write (.gguf)")
    convert.add_argument("--quant", default="f32", metavar="PLAN",
                         help='stored weight types: a type ("q4_k") or group=type pairs '
                              '("vision=f32,lm=q8_0,expert=q4_k"); types f32 f16 bf16 q8_0 q4_k (default f32)')
    convert.add_argument("--reference", type=Path, metavar="DIR",
                         help="folder of recorded reference cases to store as the bundle's reference record")
    convert.add_argument("--arch", help="model family to use instead of detecting it from SOURCE")
    convert.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                         help="a setting the checkpoint does not carry, e.g. vision.num_heads=16, "
                              "action_period_s=0.05, state_names=[shoulder,elbow] (repeatable; values are YAML)")
    convert.add_argument("--tokenizer", type=Path, metavar="FILE",
                         help="tokenizer file to carry in the bundle when the checkpoint only names one (pi0.5: SentencePiece .model; SmolVLA: tokenizer.json)")
    convert.add_argument("--no-progress", action="store_true", help="no progress bar")

    inspect = actions.add_parser("inspect", help="print a summary of a bundle")
    inspect.add_argument("bundle", type=Path)
    inspect.add_argument("--tensors", action="store_true", help="also list every tensor")
    inspect.add_argument("--no-digest", action="store_true",
                         help="skip hashing the whole file (faster on multi-GB bundles)")

    verify = actions.add_parser("verify", help="check integrity and rerun the reference record")
    verify.add_argument("bundle", type=Path)
    verify.add_argument("--backend", choices=("numba", "numpy"), default="numba",
                        help="kernel backend for the reference run (default numba)")
    verify.add_argument("--integrity-only", action="store_true",
                        help="check structure and digest only; do not run the reference record")


def run(args) -> int:
    return {"convert": _convert, "inspect": _inspect, "verify": _verify}[args.bundle_action](args)


def _convert(args) -> int:
    from embodied_ros.bundle import QuantPlan, families, open_bundle
    from embodied_ros.bundle.errors import NO_TOKENIZER

    try:
        plan = QuantPlan.parse(args.quant)
        arch = args.arch or families.detect_family(args.source)
        overrides = _overrides(args.overrides, args.tokenizer)
        families.converter(arch).convert(args.source, args.output, plan, args.reference, not args.no_progress,
                                         overrides=overrides)
        bundle = open_bundle(args.output, architecture=arch)
    except (ValueError, OSError) as problem:  # ValueError includes BundleError
        print(f"bundle convert: {problem}", file=sys.stderr)
        return 1
    weights = sum(bundle.tensor_info(name).nbytes for name in bundle.weight_names)
    print(f"wrote {args.output}: {bundle.architecture}, {len(bundle.weight_names)} weights, "
          f"{weights / 2 ** 20:.2f} MiB of weights, plan {bundle.quant_plan}")
    if bundle.tokenizer_model is None:
        print(f"bundle convert: warning: {args.output}: {NO_TOKENIZER}", file=sys.stderr)
    return 0


def _overrides(pairs: list[str], tokenizer: Path | None) -> dict:
    import yaml

    overrides = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {pair!r}")
        overrides[key.strip()] = yaml.safe_load(value)
    if tokenizer is not None:
        overrides["tokenizer"] = str(tokenizer)
    return overrides


def _inspect(args) -> int:
    from embodied_ros.bundle import BundleError, open_bundle
    from embodied_ros.bundle.summary import describe

    try:
        bundle = open_bundle(args.bundle, verify_digest=not args.no_digest)
    except BundleError as problem:
        print(f"bundle inspect: {problem}", file=sys.stderr)
        return 2
    print(describe(bundle, digest_checked=not args.no_digest, list_tensors=args.tensors))
    return 0


def _verify(args) -> int:
    from embodied_ros.bundle import BundleError, BundleIntegrityError, families, open_bundle

    try:
        bundle = open_bundle(args.bundle)
    except BundleIntegrityError as problem:
        print(f"FAIL {problem}", file=sys.stderr)
        return 1
    except BundleError as problem:
        print(f"UNREADABLE {problem}", file=sys.stderr)
        return 2
    print(f"{args.bundle}: structure and digest ok ({bundle.architecture}, {bundle.digest})")
    if args.integrity_only:
        return 0
    if bundle.reference is None:
        print(f"FAIL {args.bundle}: no reference record to rerun (use --integrity-only to check the file only)",
              file=sys.stderr)
        return 1
    try:
        error, tolerance = families.verify_reference(bundle, args.backend)
    except ValueError as problem:
        print(f"UNREADABLE {problem}", file=sys.stderr)
        return 2
    passed = error <= tolerance
    print(f"{'PASS' if passed else 'FAIL'} reference record: max abs error {error:.3g} "
          f"{'<=' if passed else '>'} tolerance {tolerance:g}")
    return 0 if passed else 1
