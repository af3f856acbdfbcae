"""HY-VLA's recorded cases: the `parity` command, a bundle's reference record and `bundle verify`.

A record (made by reference/hy_vla/gen_records.py, HY-VLA's own `forward_evaluate`) is a checkpoint in the
released layout at the top of its folder, cases.json (tasks, settings, versions) and cases.npz with, per
case k, what `sample_actions` consumed: `case{k}_images` [slots, (K,) 3, S, S] in [-1, 1] (present cameras
first, then padding slots), `case{k}_image_masks` [slots], `case{k}_tokens` / `case{k}_token_mask` [L],
`case{k}_state` [max_state_dim] (normalized, padded), `case{k}_noise` [C, max_action_dim]; what it produced,
`case{k}_normalized_actions` [C, 20]; and the raw inputs the evaluation's wrapper made them from,
`case{k}_{camera}_uint8` [(K,) H, W, 3] (absent = camera missing) and `case{k}_state_raw`, with the
actions it hands on, `case{k}_actions` [C, 20] (de-normalized, relative). A case is run twice: from its
model-space inputs through the model, and from its raw inputs through the runtime's stages (memory frames
fed one observation at a time, the current one last); the raw case's actions are compared in model space
(divided by the statistics' std), where the tolerances are set. A record's `precision` (cases.json) is the reference's:
"float32" (its casts to bf16 ran as float32: the model's math in float32; the tolerance is the f32 one,
1e-4, or the weakest stored type's) or "bfloat16" (the code's own casts and a bf16 policy, as its
evaluation runs it; the tolerance is bf16's, 5e-2, whatever is stored: measured 0.015 in f32 and
0.018 in bf16 storage on the tiny shapes).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from embodied_ros.models.kit.records import (CASES_FILE, PIPELINE_CASES, TOLERANCES, CaseResult, case_count,
                                             converted_bundle, recorded_tasks, tolerance_for)
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation

NOTES_FILE = PIPELINE_CASES
INPUTS = ("images", "image_masks", "tokens", "token_mask", "state", "noise")


def record_tolerance(folder: Path, tolerance: float) -> float:
    """`tolerance` (the stored types') or, for a record the reference made in bf16, bf16's if larger."""
    precision = json.loads((Path(folder) / NOTES_FILE).read_text()).get("precision", "float32")
    return max(tolerance, TOLERANCES["bf16"]) if precision == "bfloat16" else tolerance


def raw_case(runtime, inputs, key: str, task: str) -> np.ndarray:
    """Physical actions [C, 20] of one case from its raw inputs, through every stage of `runtime`."""
    frames = {name: np.asarray(inputs[f"{key}_{name}_uint8"]) for name in runtime.spec.camera_names
              if f"{key}_{name}_uint8" in inputs}
    state = np.asarray(inputs[f"{key}_state_raw"])
    history = runtime.config.memory_frames - 1
    runtime.reset_memory()
    for index in range(history):
        runtime.encode(Observation(index, {name: stack[index] for name, stack in frames.items()}, state, task))
    current = {name: stack[-1] if history else stack for name, stack in frames.items()}
    return infer(runtime, Observation(history, current, state, task), np.asarray(inputs[f"{key}_noise"])).actions


def model_case(model, inputs, key: str) -> np.ndarray:
    """Normalized actions [C, action_dim] of one recorded case."""
    arrays = [np.asarray(inputs[f"{key}_{name}"]) for name in INPUTS]
    return model.sample(*arrays)[:, : model.config.action_dim]


class HyVLARecords:
    family = "hy_vla"

    def recognizes_fixture(self, path: str | Path) -> bool:
        from embodied_ros.models.hy_vla.convert import detect

        folder = Path(path)
        return (folder / CASES_FILE).is_file() and (folder / NOTES_FILE).is_file() and detect(folder)

    def _require(self, folder: Path) -> None:
        if not self.recognizes_fixture(folder):
            raise ValueError(f"{folder}: not an hy_vla record (needs {CASES_FILE} and {NOTES_FILE} beside an HY-VLA "
                             "checkpoint)")

    def run_fixture_parity(self, path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
        """Convert the record's checkpoint (stored as `quant`) and run every case; the prompt the runtime
        makes from the case's task must give the recorded token ids."""
        from embodied_ros.models.hy_vla import convert
        from embodied_ros.models.hy_vla.runtime import load_runtime, prompt_text

        folder = Path(path)
        self._require(folder)
        with converted_bundle(folder, quant, "hy_vla", convert.convert) as (bundle, tolerance):
            tolerance = record_tolerance(folder, tolerance)
            runtime = load_runtime(bundle, backend)
            results = []
            with np.load(folder / CASES_FILE) as cases:
                for k, case in enumerate(recorded_tasks(folder)):
                    key = f"case{k}"
                    error = float(np.abs(model_case(runtime.model, cases, key) - cases[f"{key}_normalized_actions"]).max())
                    tokens, mask = runtime.tokenizer.encode(prompt_text(case["task"]))
                    same = np.array_equal(tokens[mask], cases[f"{key}_tokens"][cases[f"{key}_token_mask"]])
                    results.append(CaseResult(key, error if same else float("inf"), tolerance,
                                              "" if same else "token ids differ"))
                    ours, theirs = (runtime.action_stats.normalize(actions) for actions in
                                    (raw_case(runtime, cases, key, case["task"]), cases[f"{key}_actions"]))
                    results.append(CaseResult(f"{key} raw", float(np.abs(ours - theirs).max()), tolerance))
            return results

    # ---- a bundle's reference record ---------------------------------------------------------------

    tolerance_for = staticmethod(tolerance_for)

    def reference_record(self, folder: Path, tolerance: float):
        from embodied_ros.bundle import ReferenceRecord

        folder = Path(folder)
        self._require(folder)
        inputs, expected = {}, {}
        with np.load(folder / CASES_FILE) as cases:
            for k in range(case_count(cases)):
                key = f"case{k}"
                expected[key] = cases[f"{key}_normalized_actions"]
                inputs.update({f"{key}_{name}": cases[f"{key}_{name}"] for name in INPUTS})
        return ReferenceRecord(inputs=inputs, expected=expected, tolerance=record_tolerance(folder, tolerance),
                               fields={"kind": "model"})

    def verify_reference(self, bundle, backend: str = "numba") -> tuple[float, float]:
        from embodied_ros.models.hy_vla.runtime import load_runtime

        record = bundle.reference
        if record is None:
            raise ValueError(f"{bundle.path}: bundle has no reference record")
        model = load_runtime(bundle, backend).model
        worst = max(float(np.abs(model_case(model, record.inputs, key) - expected).max())
                    for key, expected in record.expected.items())
        return worst, float(record.tolerance)

    # ---- `embodied-ros bench` (models/kit/bench.py) ------------------------------------------------

    def bench_cases(self, bundle, record: Path | None = None, backend: str = "numba") -> list:
        """The bundle's reference record; a case is one prefix and one Euler solve, timed as "chunk"."""
        from embodied_ros.models.hy_vla.runtime import load_runtime
        from embodied_ros.models.kit.bench import no_record_folders, reference_cases, whole

        no_record_folders("HY-VLA", record)
        runtime = load_runtime(bundle, backend)
        return reference_cases(bundle, runtime, lambda ref, key: whole(lambda: model_case(runtime.model, ref.inputs,
                                                                                          key)))


RECORDS = HyVLARecords()
