"""Running recorded GR00T N1.7 cases: the `parity` command, bundle reference records, `bundle verify`.

A model record is a folder with config.json + model.safetensors (convert.py) and cases.npz holding,
per case k: `case{k}_pixel_values` (patch rows of the present views), `_image_grid_thw` (1, gh, gw
per view), `_input_ids` (the prompt with image placeholders), `_state` (normalized, padded),
`_embodiment_id`, `_noise` (x at t=0) and model-space `_actions` [H, action_dim].

Tolerances on the max abs action error, by the weakest stored type of a bundle: f32 1e-4 (the
parity requirement); the others about 3x the worst error measured on groot_tiny with every weight
stored in that type (actions up to ~3.3): f16 2.4e-3, bf16 1.1e-2, q8_0 3.8e-2, q4_k 1.2e-1 (the
tiny widths are not multiples of 256, so most "q4_k" tensors fall back to q8_0 or f16).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

TOLERANCES = {"f32": 1e-4, "f16": 1e-2, "bf16": 5e-2, "q8_0": 1.5e-1, "q4_k": 4e-1}
_STRENGTH = ("f32", "f16", "bf16", "q8_0", "q4_k")  # weakest last
CASES_FILE = "cases.npz"
CASE_INPUTS = ("pixel_values", "image_grid_thw", "input_ids", "state", "embodiment_id")


@dataclass(frozen=True)
class CaseResult:
    name: str
    max_abs_error: float
    tolerance: float
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.max_abs_error <= self.tolerance


def tolerance_for(stored_types) -> float:
    weakest = max((t for t in stored_types if t in TOLERANCES), key=_STRENGTH.index, default="f32")
    return TOLERANCES[weakest]


def recognizes_fixture(path: str | Path) -> bool:
    from embodied_ros.models.groot.convert import detect

    folder = Path(path)
    return (folder / CASES_FILE).is_file() and detect(folder)


def _case_names(arrays) -> list[str]:
    names = {name.split("_", 1)[0] for name in arrays if name.startswith("case") and name.endswith("_noise")}
    return sorted(names, key=lambda name: int(name[4:]))


def run_case(model, inputs, noise: np.ndarray, key: str) -> np.ndarray:
    """Model-space actions [H, action_dim] of one recorded case (inputs named `{key}_<input>`)."""
    grids = [tuple(int(v) for v in g[1:]) for g in np.asarray(inputs[f"{key}_image_grid_thw"])]
    backbone = model.backbone(inputs[f"{key}_pixel_values"], grids, inputs[f"{key}_input_ids"])
    actions = model.sample_actions(backbone, inputs[f"{key}_state"], noise, int(inputs[f"{key}_embodiment_id"]))
    return actions[:, : model.config.action_dim]


def run_cases(model, folder: Path, tolerance: float) -> Iterator[CaseResult]:
    with np.load(Path(folder) / CASES_FILE) as data:
        cases = dict(data)
    for key in _case_names(cases):
        actions = run_case(model, cases, cases[f"{key}_noise"], key)
        yield CaseResult(key, float(np.abs(actions - cases[f"{key}_actions"]).max()), tolerance)


def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert the record's checkpoint to a temporary bundle stored as `quant` and run every case."""
    from embodied_ros.bundle import QuantPlan, open_bundle
    from embodied_ros.models.groot.convert import ARCHITECTURE, convert
    from embodied_ros.models.groot.runtime import load_model

    folder = Path(path)
    if not recognizes_fixture(folder):
        raise ValueError(f"{folder}: not a GR00T record (needs {CASES_FILE} beside a checkpoint)")
    with tempfile.TemporaryDirectory(prefix="groot_parity_") as scratch:
        bundle_path = Path(scratch) / "policy.gguf"
        convert(folder, bundle_path, QuantPlan.parse(quant))
        bundle = open_bundle(bundle_path, architecture=ARCHITECTURE)
        tolerance = tolerance_for({bundle.tensor_info(name).qtype.lower() for name in bundle.weight_names})
        return list(run_cases(load_model(bundle, backend), folder, tolerance))


def reference_record(folder: Path, tolerance: float):
    """The record a bundle carries: the folder's case inputs, noise and the reference's actions."""
    from embodied_ros.bundle import ReferenceRecord

    folder = Path(folder)
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
    from embodied_ros.models.groot.runtime import load_model

    record = bundle.reference
    if record is None:
        raise ValueError(f"{bundle.path}: bundle has no reference record")
    model = load_model(bundle, backend)
    worst = 0.0
    for key, expected in record.expected.items():
        actions = run_case(model, record.inputs, record.noise[key], key)
        worst = max(worst, float(np.abs(actions - expected).max()))
    return worst, float(record.tolerance)
