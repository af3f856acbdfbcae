"""Running recorded pi0 cases: the `parity` command, bundle reference records, `bundle verify`.

Record layouts as pi0.5's (models/pi05/parity.py), with the state:

model record     config.json + model.safetensors + cases.npz with, per case k, `case{k}_images`
                 (model order, [0, 1]), `_image_masks`, `_tokens`, `_token_mask`, `_state`
                 (model space), `_noise` and model-space `_actions` (test/data/pi0_tiny); a
                 real-time chunking record adds each case's leftover and settings
                 (test/data/pi0_rtc_tiny, records.model_record_cases).
pipeline record  checkpoint/ (LeRobot save) + cases.json (tasks, prompts) + cases.npz with raw
                 inputs `case{k}_{camera}_uint8` (absent = camera missing), `_state_raw`, `_noise`,
                 the reference's `_tokens` and physical-unit `_actions` (test/data/pi0_tiny_checkpoint,
                 made by test/data/gen_pi0_checkpoint.py).

Tolerances by the weakest stored type: models/kit/records.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from embodied_ros.models.kit import records
from embodied_ros.models.kit.records import TOLERANCES, CaseResult, tolerance_for

__all__ = ["TOLERANCES", "CaseResult", "tolerance_for", "record_kind", "recognizes_fixture", "run_cases",
           "run_fixture_parity", "reference_record", "verify_reference"]


def record_kind(folder: Path) -> str | None:
    """"model", "pipeline" or None for a folder that is not a pi0 record."""
    from embodied_ros.models.pi0.convert import detect

    return records.record_kind(folder, detect)


def recognizes_fixture(path: str | Path) -> bool:
    return record_kind(Path(path)) is not None


# ---- running cases -------------------------------------------------------------------------

def model_prefix(model, inputs, key: str):
    """The prefix cache of one recorded case; inputs holds `{key}_images`, ... as recorded."""
    images = inputs[f"{key}_images"] * np.float32(2.0) - np.float32(1.0)
    camera_mask = inputs[f"{key}_image_masks"]
    return model.build_prefix(model.image_tokens(images, camera_mask), camera_mask, inputs[f"{key}_tokens"],
                              inputs[f"{key}_token_mask"], inputs[f"{key}_state"])


def run_cases(runtime, folder: Path, tolerance: float = TOLERANCES["f32"]) -> Iterator[CaseResult]:
    kind = records.require_kind(folder, record_kind(folder), "pi0")
    if kind == "model":
        return records.model_record_cases(runtime.model, folder, tolerance, model_prefix)
    return records.pipeline_cases(runtime, folder, tolerance, runtime.prompt)


# ---- the parity command --------------------------------------------------------------------

def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert the record's checkpoint to a temporary bundle stored as `quant` and run every case."""
    from embodied_ros.models.pi0.config import ARCHITECTURE
    from embodied_ros.models.pi0.convert import convert
    from embodied_ros.models.pi0.runtime import load_runtime

    folder = Path(path)
    checkpoint = records.checkpoint_of(folder, record_kind(folder))
    with records.converted_bundle(checkpoint, quant, ARCHITECTURE, convert) as (bundle, tolerance):
        return list(run_cases(load_runtime(bundle, backend), folder, tolerance))


# ---- bundle reference records --------------------------------------------------------------

def reference_record(folder: Path, tolerance: float):
    """The record a bundle carries: the folder's inputs, noise and the reference's actions."""
    kind = records.require_kind(folder, record_kind(folder), "pi0")
    return records.reference_record(folder, kind, tolerance,
                                       ("images", "image_masks", "tokens", "token_mask", "state"))


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    """Re-run a bundle's reference record: (max abs action error, recorded tolerance)."""
    from embodied_ros.models.pi0.runtime import load_runtime

    def record_case(runtime, record, key: str) -> np.ndarray:
        cache = model_prefix(runtime.model, record.inputs, key)
        return runtime.model.sample_actions(cache, record.noise[key])[:, : record.expected[key].shape[1]]

    return records.verify_reference(bundle, lambda b: load_runtime(b, backend), record_case)
