"""pi0-FAST on this runtime next to LeRobot's PI0FastPolicy (eager float32), side by side in one run.

    python benchmarks/bench_pi0_fast.py [--record DIR] [--repeats 20] [--rounds 3] [--threads 2]

The record (default test/data/pi0_fast_tiny, made by reference/pi0_fast/gen_records.py) is converted
to an F32 bundle; each case is one chunk from model inputs (images in [0, 1], prompt ids): SigLIP,
the prefix pass, greedy decoding until "|" or max_decoding_steps, FAST detokenization. The PyTorch
side is this same script run with `--torch-side` in the reference interpreter (EMBODIED_ROS_REF_PYTHON,
see benchmarks/common.py): PI0FastPolicy.from_pretrained on the record with the record's stand-in
tokenizers, `predict_action_chunk(batch)` with its KV cache. The sides alternate by rounds, each
timing every case --repeats times after one untimed chunk, and check that both generate the same ids.
Prints the machine (CPU model and flags), per case the p50 chunk time of each side and their ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DEFAULT_RECORD = common.REPO_ROOT / "test" / "data" / "pi0_fast_tiny"
GENERATOR_FOLDER = common.REPO_ROOT / "reference" / "pi0_fast"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, default=DEFAULT_RECORD, help="a pi0-FAST model-level record")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help="do not write BENCHMARKS.md's pi0_fast_tiny section")
    parser.add_argument("--torch-side", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def set_threads(threads: int) -> None:
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)


def case_keys(record: Path) -> list[str]:
    import numpy as np

    with np.load(record / "cases.npz") as cases:
        return sorted((name[: -len("_generated_tokens")] for name in cases.files if name.endswith("_generated_tokens")),
                      key=lambda key: int(key[len("case"):]))


# ---- the PyTorch side (reference interpreter) ------------------------------------------------------

def torch_side(args) -> None:
    import numpy as np
    import torch

    sys.path.insert(0, str(GENERATOR_FOLDER))
    import gen_records as reference  # the stand-in tokenizers and the size patches the record was made with
    from lerobot.policies.molmoact2.molmoact2_hf_model.action_tokenizer import UniversalActionProcessor

    torch.set_num_threads(args.threads)
    record = args.record
    tokenizer = reference.PaliGemmaStandIn((record / "tokenizer.model").read_bytes())
    reference.shrink(tokenizer, UniversalActionProcessor.from_pretrained_local(str(record / "action_tokenizer")))
    policy = reference.fast_modeling.PI0FastPolicy.from_pretrained(record).eval()
    cameras = list(policy.config.image_features)
    results = {}
    with np.load(record / "cases.npz") as cases:
        for key in case_keys(record):
            batch = {camera: torch.from_numpy(cases[f"{key}_images"][i:i + 1]) for i, camera in enumerate(cameras)
                     if cases[f"{key}_image_masks"][i]}
            batch["observation.language.tokens"] = torch.from_numpy(cases[f"{key}_tokens"])[None]
            batch["observation.language.attention_mask"] = torch.from_numpy(cases[f"{key}_token_mask"])[None]
            tokens = {}
            sample = policy.model.sample_actions_fast_kv_cache

            def kept(*a, **k):
                tokens["ids"] = sample(*a, **k)
                return tokens["ids"]

            policy.model.sample_actions_fast_kv_cache = kept
            runs = []
            with torch.inference_mode():
                for index in range(args.repeats + 1):
                    start = time.perf_counter()
                    policy.predict_action_chunk(batch)
                    if index:
                        runs.append((time.perf_counter() - start) * 1e3)
            policy.model.sample_actions_fast_kv_cache = sample
            results[key] = {"runs_ms": runs, "tokens": tokens["ids"][0].tolist()}
    import lerobot
    print(json.dumps({"cases": results, "versions": {"torch": torch.__version__, "lerobot": lerobot.__version__},
                      "threads": torch.get_num_threads()}))


def run_torch_side(args) -> dict:
    python = common.reference_python()
    if not Path(python).exists():
        raise common.ReferenceUnavailable(f"no PyTorch reference interpreter at {python} "
                                          f"(set {common.REFERENCE_PYTHON_ENV})")
    command = [python, str(Path(__file__).resolve()), "--torch-side", "--record", str(args.record),
               "--repeats", str(args.repeats), "--threads", str(args.threads)]
    proc = subprocess.run(command, capture_output=True, text=True, env=common.reference_environment())
    if proc.returncode:
        raise RuntimeError(f"PyTorch side failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- this runtime ----------------------------------------------------------------------------------

def our_side(model, record: Path, repeats: int) -> dict:
    import numpy as np

    results = {}
    with np.load(record / "cases.npz") as cases:
        for key in case_keys(record):
            images = cases[f"{key}_images"] * np.float32(2.0) - np.float32(1.0)
            mask, tokens, token_mask = cases[f"{key}_image_masks"], cases[f"{key}_tokens"], cases[f"{key}_token_mask"]
            runs, decoded = [], None
            for index in range(repeats + 1):
                start = time.perf_counter()
                decoded = model.decode(model.build_prefix(model.image_tokens(images, mask), mask, tokens, token_mask))
                if index:
                    runs.append((time.perf_counter() - start) * 1e3)
            results[key] = {"runs_ms": runs, "tokens": decoded.tokens.tolist()}
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.torch_side:
        torch_side(args)
        return 0
    set_threads(args.threads)
    from embodied_ros.bundle import open_bundle
    from embodied_ros.models.pi0_fast.convert import convert
    from embodied_ros.models.pi0_fast.runtime import load_runtime

    print(f"machine: {common.machine_line()}")
    print(f"record {args.record}, {args.threads} threads, {args.rounds} rounds x {args.repeats} chunks per case "
          "and side" + common.runtime_products_note())
    with tempfile.TemporaryDirectory(prefix="bench_pi0_fast_") as scratch:
        bundle = Path(scratch) / "pi0_fast.gguf"
        convert(args.record, bundle, "f32")
        runtime = load_runtime(open_bundle(bundle, architecture="pi0_fast"))
        runtime.warm_up()
        ours, theirs, versions = {}, {}, {}
        for _ in range(args.rounds):
            for key, result in our_side(runtime.model, args.record, args.repeats).items():
                ours.setdefault(key, {"runs_ms": [], "tokens": result["tokens"]})["runs_ms"] += result["runs_ms"]
            reference = run_torch_side(args)
            versions = reference["versions"]
            for key, result in reference["cases"].items():
                theirs.setdefault(key, {"runs_ms": [], "tokens": result["tokens"]})["runs_ms"] += result["runs_ms"]
    print(f"PyTorch side: LeRobot {versions.get('lerobot')} PI0FastPolicy.predict_action_chunk, torch "
          f"{versions.get('torch')}, eager float32, KV cache")
    rows = []
    for key in ours:
        generated = len(ours[key]["tokens"])
        same = theirs[key]["tokens"][:generated] == ours[key]["tokens"] and not any(theirs[key]["tokens"][generated:])
        mine, other = statistics.median(ours[key]["runs_ms"]), statistics.median(theirs[key]["runs_ms"])
        rows.append({"case": key, "tokens": generated, "same ids": "yes" if same else "NO",
                     "ours p50 ms": mine, "PyTorch p50 ms": other, "PyTorch / ours": other / mine,
                     "ours best ms": min(ours[key]["runs_ms"]), "PyTorch best ms": min(theirs[key]["runs_ms"])})
    table = common.markdown_table(rows)
    print(table)
    total_ours, total_theirs = sum(row["ours p50 ms"] for row in rows), sum(row["PyTorch p50 ms"] for row in rows)
    summary = (f"sum of the cases' p50: ours {total_ours:.2f} ms, PyTorch {total_theirs:.2f} ms, "
               f"PyTorch / ours = {total_theirs / total_ours:.2f}x; load average now {os.getloadavg()[0]:.2f}")
    print(summary)
    if not args.no_write:
        body = (f"{args.record.name}, F32 bundle, {args.threads} threads, {args.rounds} rounds x {args.repeats} chunks "
                f"per case and side, alternating; LeRobot {versions.get('lerobot')} PI0FastPolicy."
                f"predict_action_chunk, torch {versions.get('torch')}, eager float32 with its KV cache. A chunk: "
                "SigLIP, the prefix pass, greedy decoding until \"|\" or max_decoding_steps, FAST "
                f"detokenization.\n\n{table}\n\n{summary}")
        common.write_section(common.BENCHMARKS_MD, "pi0_fast_tiny", body,
                             command="python benchmarks/bench_pi0_fast.py " + " ".join(sys.argv[1:]),
                             machine=common.machine_line())
    return 0 if all(row["same ids"] == "yes" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
