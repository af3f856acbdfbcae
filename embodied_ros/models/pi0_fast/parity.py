"""Running pi0-FAST's recorded cases: the `parity` command, a bundle's reference record, `bundle verify`.

Record layouts (test/data/pi0_fast_tiny, test/data/pi0_fast_tiny_checkpoint; their README.md):

model     a LeRobot save (config.json, model.safetensors) + tokenizer.model + action_tokenizer/ +
          cases.json (head counts) + cases.npz with, per case k, `case{k}_images` ([0, 1], config camera
          order), `_image_masks`, `_tokens` (bos first, padded), `_token_mask`, LeRobot's
          `_generated_tokens` (max_decoding_steps long, zeros after "|") and model-space `_actions`
pipeline  checkpoint/ (the same, with the processors' statistics) + cases.json (tasks, prompts) +
          cases.npz with raw `case{k}_{camera}_uint8`, `_state_raw`, the prompt's `_tokens` and
          `_token_mask`, `_generated_tokens` and physical `_actions`

A case passes when the generated ids equal LeRobot's exactly and the actions are within the tolerance
(an id that differs makes the error infinite: the chunks then have nothing in common). Quantized
weights move the logits enough to change an argmax of the tiny random model (its smallest lead is
6e-4): `parity --quant` then reports the step from which the ids differ.

The module is the converter's `records` (kit/lerobot_save.py): reference_record, tolerance_for,
verify_reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from embodied_ros.models.kit import records
from embodied_ros.models.kit.records import (CASES_FILE, TOLERANCES, CaseResult, checkpoint_of, converted_bundle,
                                             pipeline_observation, recorded_tasks, require_kind)
from embodied_ros.models.pi0_fast import convert
from embodied_ros.models.pi0_fast.config import ARCHITECTURE
from embodied_ros.models.pi0_fast.tokens import padded_tokens
from embodied_ros.pipeline.stages import infer

FAMILY = "pi0-FAST"
MODEL_INPUTS = ("images", "image_masks", "tokens", "token_mask")
tolerance_for = records.tolerance_for


def record_kind(folder: str | Path) -> str | None:
    return records.record_kind(Path(folder), convert.detect)


def recognizes_fixture(path: str | Path) -> bool:
    return record_kind(path) is not None


def case_keys(arrays) -> list[str]:
    names = arrays.files if hasattr(arrays, "files") else arrays
    return sorted((name[: -len("_generated_tokens")] for name in names if name.endswith("_generated_tokens")),
                  key=lambda key: int(key[len("case"):]))


def model_case(model, inputs, key: str):
    """The decoded chunk of one model-level case; `inputs` holds `{key}_images`, ... as recorded."""
    images, mask = records.recorded_images(inputs, key)
    prefix = model.build_prefix(model.image_tokens(images, mask), mask, inputs[f"{key}_tokens"],
                                inputs[f"{key}_token_mask"])
    return model.decode(prefix)


def compare(actions: np.ndarray, tokens: np.ndarray, expected_actions: np.ndarray, expected_tokens: np.ndarray,
            problems: list[str] | None = None) -> tuple[float, str]:
    """(max abs action error, what else differed); inf when the generated ids differ."""
    problems = list(problems or [])
    differing = np.flatnonzero(padded_tokens(tokens, len(expected_tokens)) != expected_tokens)
    if differing.size:
        problems.append(f"generated ids differ from LeRobot's from step {differing[0]} on")
    error = float(np.abs(actions - expected_actions).max()) if actions.shape == expected_actions.shape else np.inf
    return (error if not problems else float("inf")), "; ".join(problems)


def model_cases(model, folder: Path, tolerance: float) -> Iterator[CaseResult]:
    with np.load(Path(folder) / CASES_FILE) as cases:
        for key in case_keys(cases):
            decoded = model_case(model, cases, key)
            error, detail = compare(decoded.actions, decoded.tokens, cases[f"{key}_actions"],
                                    cases[f"{key}_generated_tokens"])
            yield CaseResult(key, error, tolerance, detail)


def pipeline_cases(runtime, folder: Path, tolerance: float) -> Iterator[CaseResult]:
    """Raw record: uint8 images + raw state + task -> physical actions; prompt and prompt ids checked too."""
    recorded = recorded_tasks(folder)
    with np.load(Path(folder) / CASES_FILE) as cases:
        for k, key in enumerate(case_keys(cases)):
            observation = pipeline_observation(cases, recorded[k]["task"], key, runtime.spec.camera_names, k)
            problems = []
            prompt = runtime.prompt(observation)
            if "prompt" in recorded[k] and prompt != recorded[k]["prompt"]:
                problems.append(f"prompt differs: {prompt!r}")
            tokens, mask = runtime.tokenizer.encode(prompt)
            if not np.array_equal(tokens[mask], cases[f"{key}_tokens"][cases[f"{key}_token_mask"]]):
                problems.append("prompt ids differ")
            chunk = infer(runtime, observation)
            error, detail = compare(chunk.actions, chunk.tokens, cases[f"{key}_actions"],
                                    cases[f"{key}_generated_tokens"], problems)
            yield CaseResult(key, error, tolerance, detail)


def run_cases(runtime, folder: Path, tolerance: float = TOLERANCES["f32"]) -> Iterator[CaseResult]:
    kind = require_kind(folder, record_kind(folder), FAMILY)
    if kind == "model":
        return model_cases(runtime.model, folder, tolerance)
    return pipeline_cases(runtime, folder, tolerance)


def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert the record's checkpoint to a temporary bundle stored as `quant` and run every case.
    Quantized weights may change an argmax, and then the ids and the chunk differ."""
    from embodied_ros.models.pi0_fast.runtime import load_runtime

    folder = Path(path)
    checkpoint = checkpoint_of(folder, record_kind(folder))
    with converted_bundle(checkpoint, quant, ARCHITECTURE, convert.convert) as (bundle, tolerance):
        return list(run_cases(load_runtime(bundle, backend), folder, tolerance))


# ---- a bundle's reference record -----------------------------------------------------------

def reference_record(folder: Path, tolerance: float):
    """The record a bundle carries: a model record's inputs, or a pipeline record's raw state, uint8
    images and tasks; expected: each case's actions and LeRobot's generated ids."""
    from embodied_ros.bundle import ReferenceRecord

    folder = Path(folder)
    kind = require_kind(folder, record_kind(folder), FAMILY)
    inputs, expected, fields = {}, {}, {"kind": kind}
    with np.load(folder / CASES_FILE) as cases:
        for key in case_keys(cases):
            expected[f"{key}_actions"] = cases[f"{key}_actions"]
            expected[f"{key}_generated_tokens"] = cases[f"{key}_generated_tokens"]
            names = [f"{key}_{name}" for name in MODEL_INPUTS] if kind == "model" else \
                [name for name in cases.files if name.startswith(f"{key}_") and name.endswith("_uint8")] + \
                [f"{key}_state_raw"]
            inputs.update({name: cases[name] for name in names})
    if kind == "pipeline":
        fields.update({f"case{k}_task": case["task"] for k, case in enumerate(recorded_tasks(folder))})
    return ReferenceRecord(inputs=inputs, expected=expected, tolerance=tolerance, fields=fields)


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    """Re-run a bundle's reference record: (max abs action error, inf when ids differ; recorded tolerance)."""
    from embodied_ros.models.pi0_fast.runtime import load_runtime

    record = bundle.reference
    if record is None:
        raise ValueError(f"{bundle.path}: bundle has no reference record")
    runtime = load_runtime(bundle, backend)
    worst = 0.0
    for key in case_keys(record.expected):
        if record.fields.get("kind") == "pipeline":
            observation = pipeline_observation(record.inputs, record.fields[f"{key}_task"], key,
                                               runtime.spec.camera_names)
            chunk = infer(runtime, observation)
        else:
            chunk = model_case(runtime.model, record.inputs, key)
        error, _ = compare(chunk.actions, chunk.tokens, record.expected[f"{key}_actions"],
                           record.expected[f"{key}_generated_tokens"])
        worst = max(worst, error)
    return worst, float(record.tolerance)


def bench_cases(bundle, record: Path | None = None, backend: str = "numba") -> list:
    """`embodied-ros bench`: the bundle's reference record; a model case runs SigLIP (perception), the
    prefix and the greedy decode (action). The chunk's ids are not compared here (`bundle verify` does)."""
    from embodied_ros.models.kit.bench import no_record_folders, reference_cases, timed
    from embodied_ros.models.pi0_fast.runtime import load_runtime

    no_record_folders(FAMILY, record)
    runtime = load_runtime(bundle, backend)
    model = runtime.model

    def model_stages(ref, key):
        images, mask = records.recorded_images(ref.inputs, key)
        return timed(("perception", lambda _: model.image_tokens(images, mask)),
                     ("prefix", lambda tokens: model.build_prefix(tokens, mask, ref.inputs[f"{key}_tokens"],
                                                                  ref.inputs[f"{key}_token_mask"])),
                     ("action", lambda prefix: model.decode(prefix).actions))

    return reference_cases(bundle, runtime, model_stages, keys=lambda ref: case_keys(list(ref.expected)),
                           expected_of=lambda ref, key: ref.expected[f"{key}_actions"])
