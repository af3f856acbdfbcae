"""Running recorded GR00T N1.7 cases: the `parity` command, bundle reference records, `bundle verify`.

A model record is a folder with config.json + model.safetensors (convert.py) and cases.npz holding,
per case k: `case{k}_pixel_values` (patch rows of the present views), `_image_grid_thw` (1, gh, gw
per view), `_input_ids` (the prompt with image placeholders), `_state` (normalized, padded),
`_embodiment_id`, `_noise` (x at t=0) and model-space `_actions` [H, action_dim].

A pipeline record (test/data/groot_pipeline_tiny, made by reference/gen_groot_pipeline.py) is a
LeRobot save in checkpoint/ with its processors and tokenizer, cases.json (task per case) and
cases.npz with the raw inputs (`case{k}_{camera}_uint8` frames, `_state_raw`), `_noise`, LeRobot's
token ids (`_tokens`), model-space `_actions_model` and decoded physical `_actions`: the runtime
runs from the raw inputs, its token ids must equal LeRobot's, its actions lie within the tolerance.

Tolerances on the max abs action error, by the weakest stored type of a bundle: f32 1e-4 (the
parity requirement); the others about 3x the worst error measured on groot_tiny with every weight
stored in that type (actions up to ~3.3): f16 2.4e-3, bf16 1.1e-2, q8_0 3.8e-2, q4_k 1.2e-1 (the
tiny widths are not multiples of 256, so most "q4_k" tensors fall back to q8_0 or f16).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from embodied_ros.models.kit import records
from embodied_ros.models.kit.records import CASES_FILE, CaseResult

TOLERANCES = {"f32": 1e-4, "f16": 1e-2, "bf16": 5e-2, "q8_0": 1.5e-1, "q4_k": 4e-1}
CASE_INPUTS = ("pixel_values", "image_grid_thw", "input_ids", "state", "embodiment_id")


def tolerance_for(stored_types) -> float:
    return records.tolerance_for(stored_types, TOLERANCES)


def record_kind(path: str | Path) -> str | None:
    from embodied_ros.models.groot.convert import detect

    return records.record_kind(Path(path), detect)


def recognizes_fixture(path: str | Path) -> bool:
    return record_kind(path) is not None


def _case_names(arrays) -> list[str]:
    names = {name.split("_", 1)[0] for name in arrays if name.startswith("case") and name.endswith("_noise")}
    return sorted(names, key=lambda name: int(name[4:]))


def run_case(model, inputs, noise: np.ndarray, key: str) -> np.ndarray:
    """Model-space actions [H, action_dim] of one recorded case (inputs named `{key}_<input>`)."""
    return model_stages(model, inputs, key, noise)()[1]


def run_cases(model, folder: Path, tolerance: float) -> Iterator[CaseResult]:
    with np.load(Path(folder) / CASES_FILE) as data:
        cases = dict(data)
    for key in _case_names(cases):
        actions = run_case(model, cases, cases[f"{key}_noise"], key)
        yield CaseResult(key, float(np.abs(actions - cases[f"{key}_actions"]).max()), tolerance)


def run_pipeline_cases(runtime, folder: Path, tolerance: float) -> Iterator[CaseResult]:
    """Raw frames + raw state + task -> physical actions; the prompt's token ids must be LeRobot's."""
    from embodied_ros.pipeline.stages import infer

    folder = Path(folder)
    recorded = records.recorded_tasks(folder)
    with np.load(folder / CASES_FILE) as data:
        cases = dict(data)
    for k, case in enumerate(recorded):
        key = f"case{k}"
        observation = records.pipeline_observation(cases, case["task"], key, runtime.spec.camera_names, k)
        embeddings = runtime.encode(observation)
        prefix = runtime.build_prefix(embeddings, observation)
        if not np.array_equal(prefix.tensors["tokens"], cases[f"{key}_tokens"]):
            yield CaseResult(key, float("inf"), tolerance, "token ids differ from LeRobot's")
            continue
        actions = infer(runtime, observation, cases[f"{key}_noise"]).actions
        yield CaseResult(key, float(np.abs(actions - cases[f"{key}_actions"]).max()), tolerance)


def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert the record's checkpoint to a temporary bundle stored as `quant` and run every case."""
    from embodied_ros.models.groot.convert import ARCHITECTURE, convert
    from embodied_ros.models.groot.runtime import load_model, load_runtime

    folder = Path(path)
    kind = records.require_kind(folder, record_kind(folder), "GR00T")
    checkpoint = records.checkpoint_of(folder, kind)
    with records.converted_bundle(checkpoint, quant, ARCHITECTURE, convert, TOLERANCES) as (bundle, tolerance):
        if kind == "pipeline":
            return list(run_pipeline_cases(load_runtime(bundle, backend), folder, tolerance))
        return list(run_cases(load_model(bundle, backend), folder, tolerance))


def reference_record(folder: Path, tolerance: float):
    """The record a bundle carries: the folder's case inputs, noise and the reference's actions."""
    from embodied_ros.bundle import ReferenceRecord

    folder = Path(folder)
    if record_kind(folder) == "pipeline":
        return records.reference_record(folder, "pipeline", tolerance, CASE_INPUTS)
    if not (folder / CASES_FILE).is_file():
        raise ValueError(f"{folder}: no {CASES_FILE} to take a reference record from")
    with np.load(folder / CASES_FILE) as data:
        cases = dict(data)
    inputs, noise, expected = {}, {}, {}
    for key in _case_names(cases):
        missing = [name for name in CASE_INPUTS if f"{key}_{name}" not in cases]
        if missing or f"{key}_actions" not in cases:
            raise ValueError(f"{folder / CASES_FILE}: {key} lacks {', '.join(missing) or 'actions'}")
        inputs.update({f"{key}_{name}": cases[f"{key}_{name}"] for name in CASE_INPUTS})
        noise[key] = cases[f"{key}_noise"]
        expected[key] = cases[f"{key}_actions"]
    return ReferenceRecord(inputs=inputs, expected=expected, tolerance=tolerance, noise=noise,
                           fields={"kind": "model"})


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    """Re-run a bundle's reference record: (max abs action error, recorded tolerance)."""
    from embodied_ros.models.groot.runtime import load_model, load_runtime

    record = bundle.reference
    if record is not None and record.fields.get("kind") == "pipeline":
        return records.verify_reference(bundle, lambda b: load_runtime(b, backend), None)
    return records.verify_reference(bundle, lambda b: load_model(b, backend),
                                       lambda model, record, key: run_case(model, record.inputs, record.noise[key], key))


def model_stages(model, inputs, key: str, noise: np.ndarray):
    """A model record's case as the prefix (Qwen3-VL backbone over views and prompt) and action stages."""
    from embodied_ros.models.kit.bench import timed

    grids = [tuple(int(v) for v in g[1:]) for g in np.asarray(inputs[f"{key}_image_grid_thw"])]
    return timed(("prefix", lambda _: model.backbone(inputs[f"{key}_pixel_values"], grids, inputs[f"{key}_input_ids"])),
                 ("action", lambda backbone: model.sample_actions(backbone, inputs[f"{key}_state"], noise,
                                                                  int(inputs[f"{key}_embodiment_id"]))
                  [:, : model.config.action_dim]))


def bench_cases(bundle, record: Path | None = None, backend: str = "numba") -> list:
    """`embodied-ros bench`: the cases of a GR00T record folder, else of the bundle's reference record."""
    from embodied_ros.models.groot.runtime import load_model, load_runtime
    from embodied_ros.models.kit.bench import BenchCase, pipeline_stages, reference_cases

    if record is None:
        reference = bundle.reference
        pipeline = reference is not None and reference.fields.get("kind") == "pipeline"
        runtime = load_runtime(bundle, backend) if pipeline else None
        model = runtime.model if pipeline else load_model(bundle, backend)
        return reference_cases(bundle, runtime, lambda ref, key: model_stages(model, ref.inputs, key, ref.noise[key]))
    folder = Path(record)
    kind = records.require_kind(folder, record_kind(folder), "GR00T")
    with np.load(folder / CASES_FILE) as data:
        cases = dict(data)
    if kind == "pipeline":
        runtime = load_runtime(bundle, backend)
        return [BenchCase(f"case{k}", pipeline_stages(runtime, records.pipeline_observation(
            cases, case["task"], f"case{k}", runtime.spec.camera_names, k), cases[f"case{k}_noise"]),
            cases[f"case{k}_actions"]) for k, case in enumerate(records.recorded_tasks(folder))]
    model = load_model(bundle, backend)
    return [BenchCase(key, model_stages(model, cases, key, cases[f"{key}_noise"]), cases[f"{key}_actions"])
            for key in _case_names(cases)]
