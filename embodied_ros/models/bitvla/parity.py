"""BitVLA's recorded cases: the `parity` command, a bundle's reference record and `bundle verify`.

Two record layouts (made by reference/bitvla/gen_records.py, BitVLA's own evaluation code):

model record     a checkpoint in the released layout at the top of the folder, cases.json (settings,
                 tasks, prompts) and cases.npz with, per case k, what `predict_action` consumed,
                 `case{k}_pixel_values` [cameras, 3, S, S], `case{k}_input_ids` [L],
                 `case{k}_proprio` [P] (normalized; absent without a projector), and what it produced,
                 `case{k}_normalized_actions` [chunk, action_dim] (compared) and `case{k}_actions`
pipeline record  checkpoint/ (released layout) + cases.json (tasks, prompts, settings) + cases.npz with raw
                 inputs `case{k}_{camera}_uint8` [224, 224, 3] (absent = camera missing),
                 `case{k}_state_raw`, the reference's `case{k}_tokens` and physical `case{k}_actions`

Tolerance on the max abs action error: 1e-4, in float products (the reference's arithmetic) and in
integer products alike (their sums are exact; only the last rounding of a product differs), with
f32 storage of the other tensors; other stored types take the kit's tolerance of the weakest
(models/kit/records.py). Ternary storage loses nothing: it is the reference's own ternarization.

Why a record must be well conditioned: every BitLinear rounds its activations to int8, so an
activation within float32 noise of a rounding tie goes to either neighbour depending on the
summation order of the implementation, and that one level moves the chunk by ~1e-2. Two correct
float32 implementations disagree on about one such activation per case at the tiny records' sizes.
gen_records.py therefore keeps only draws whose actions do not move when every BitLinear input is
perturbed by float32-sized noise (reference/bitvla/README.md); on those, this runtime's error is ~1e-6.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np

from embodied_ros.models.kit.records import CASES_FILE, CHECKPOINT_FOLDER, TOLERANCES, CaseResult, converted_bundle
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation

NOTES_FILE = "cases.json"
FLOAT_TOLERANCE = TOLERANCES["f32"]
INTEGER_TOLERANCE = TOLERANCES["f32"]


def case_count(cases) -> int:
    return len([name for name in cases.files if name.startswith("case") and name.endswith("_normalized_actions")])


def tolerance_for(stored_types) -> float:
    """The bundle's reference tolerance: the weakest stored type's (tq2_0 counts as f32: exact)."""
    tolerance = max([TOLERANCES[t] for t in stored_types if t in TOLERANCES] or [FLOAT_TOLERANCE])
    return max(tolerance, INTEGER_TOLERANCE) if "tq2_0" in stored_types else tolerance


def _notes(folder: Path) -> list[dict]:
    return json.loads((Path(folder) / NOTES_FILE).read_text()).get("cases", [])


class BitVLARecords:
    family = "bitvla"

    # ---- which folders ---------------------------------------------------------------------------

    def record_kind(self, folder: str | Path) -> str | None:
        from embodied_ros.models.bitvla.convert import detect

        folder = Path(folder)
        if not (folder / CASES_FILE).is_file() or not (folder / NOTES_FILE).is_file():
            return None
        if (folder / CHECKPOINT_FOLDER).is_dir() and detect(folder / CHECKPOINT_FOLDER):
            return "pipeline"
        return "model" if detect(folder) else None

    def recognizes_fixture(self, path: str | Path) -> bool:
        return self.record_kind(path) is not None

    def _kind(self, folder: Path) -> str:
        kind = self.record_kind(folder)
        if kind is None:
            raise ValueError(f"{folder}: not a bitvla record (needs {CASES_FILE} and {NOTES_FILE} beside a BitVLA "
                             "checkpoint)")
        return kind

    # ---- one case --------------------------------------------------------------------------------

    @staticmethod
    def model_case(model, inputs, key: str) -> np.ndarray:
        """Normalized actions of one model-record case; inputs holds `{key}_pixel_values`, ..."""
        proprio = inputs[f"{key}_proprio"] if f"{key}_proprio" in inputs else None
        return model.sample(np.asarray(inputs[f"{key}_pixel_values"]), np.asarray(inputs[f"{key}_input_ids"]), proprio)

    @staticmethod
    def observation(inputs, task: str, key: str, camera_names, stamp_ns: int = 0) -> Observation:
        images = {name: np.asarray(inputs[f"{key}_{name}_uint8"]) for name in camera_names
                  if f"{key}_{name}_uint8" in inputs}
        return Observation(stamp_ns=stamp_ns, images=images, state=np.asarray(inputs[f"{key}_state_raw"]),
                           instruction=task)

    def _case_errors(self, runtimes, folder: Path, kind: str) -> Iterator[tuple[str, list[float], str]]:
        """(case name, max abs error per runtime, what else differed) of every case."""
        notes = _notes(folder)
        with np.load(folder / CASES_FILE) as cases:
            for k in range(case_count(cases)):
                key, problems, errors = f"case{k}", [], []
                for runtime in runtimes:
                    if kind == "model":
                        actions = self.model_case(runtime.model, cases, key)
                        expected = cases[f"{key}_normalized_actions"]
                    else:
                        observation = self.observation(cases, notes[k]["task"], key, runtime.spec.camera_names, k)
                        text = runtime.prompt(observation, len(observation.images))
                        if "prompt" in notes[k] and text != notes[k]["prompt"]:
                            problems.append(f"prompt differs: {text!r}")
                        if not np.array_equal(runtime.token_ids(text), cases[f"{key}_tokens"]):
                            problems.append("token ids differ")
                        actions, expected = infer(runtime, observation).actions, cases[f"{key}_actions"]
                    errors.append(float(np.abs(actions - expected).max()))
                yield key, errors, "; ".join(sorted(set(problems)))

    # ---- the parity command ------------------------------------------------------------------------

    def run_fixture_parity(self, path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
        """Convert the record's checkpoint (other tensors stored as `quant`) and run every case. With f32
        the result is the float products' error (tolerance 1e-4) and the detail states the integer
        products'; otherwise the integer products' error against the stored types' tolerance."""
        from embodied_ros.models.bitvla import convert
        from embodied_ros.models.bitvla.runtime import load_runtime

        folder = Path(path)
        kind = self._kind(folder)
        checkpoint = folder / CHECKPOINT_FOLDER if kind == "pipeline" else folder
        with converted_bundle(checkpoint, quant, "bitvla", convert.convert) as (bundle, _):
            stored = {bundle.tensor_info(name).qtype.lower() for name in bundle.weight_names}
            runtimes = [load_runtime(bundle, backend, "float"), load_runtime(bundle, backend, "integer")]
            results = []
            for key, (float_error, integer_error), problems in self._case_errors(runtimes, folder, kind):
                detail = f"integer products: max_abs_err={integer_error:.3g}" + (f"; {problems}" if problems else "")
                if quant == "f32":
                    error, tolerance = float_error, FLOAT_TOLERANCE
                else:
                    error, tolerance = integer_error, tolerance_for(stored)
                results.append(CaseResult(key, error if not problems else float("inf"), tolerance, detail))
            return results

    # ---- a bundle's reference record ---------------------------------------------------------------

    tolerance_for = staticmethod(tolerance_for)

    def reference_record(self, folder: Path, tolerance: float):
        from embodied_ros.bundle import ReferenceRecord

        folder = Path(folder)
        kind = self._kind(folder)
        inputs, expected, fields = {}, {}, {"kind": kind}
        with np.load(folder / CASES_FILE) as cases:
            for k in range(case_count(cases)):
                key = f"case{k}"
                if kind == "model":
                    expected[key] = cases[f"{key}_normalized_actions"]
                    for name in ("pixel_values", "input_ids", "proprio"):
                        if f"{key}_{name}" in cases.files:
                            inputs[f"{key}_{name}"] = cases[f"{key}_{name}"]
                else:
                    expected[key] = cases[f"{key}_actions"]
                    inputs[f"{key}_state_raw"] = cases[f"{key}_state_raw"]
                    for name in cases.files:
                        if name.startswith(f"{key}_") and name.endswith("_uint8"):
                            inputs[name] = cases[name]
        if kind == "pipeline":
            for k, case in enumerate(_notes(folder)):
                fields[f"case{k}_task"] = case["task"]
        return ReferenceRecord(inputs=inputs, expected=expected, tolerance=tolerance, fields=fields)

    def verify_reference(self, bundle, backend: str = "numba") -> tuple[float, float]:
        """Re-run a bundle's reference record (products as the runtime defaults): (max abs error, tolerance)."""
        from embodied_ros.models.bitvla.runtime import load_runtime

        record = bundle.reference
        if record is None:
            raise ValueError(f"{bundle.path}: bundle has no reference record")
        runtime = load_runtime(bundle, backend)
        worst = 0.0
        for key, expected in record.expected.items():
            if record.fields.get("kind") == "pipeline":
                observation = self.observation(record.inputs, record.fields[f"{key}_task"], key,
                                               runtime.spec.camera_names)
                actions = infer(runtime, observation).actions
            else:
                actions = self.model_case(runtime.model, record.inputs, key)
            worst = max(worst, float(np.abs(actions - expected).max()))
        return worst, float(record.tolerance)


    # ---- `embodied-ros bench` (models/kit/bench.py) ------------------------------------------------

    def bench_cases(self, bundle, record: Path | None = None, backend: str = "numba") -> list:
        """The bundle's reference record; a model case is one LM pass and the head, timed as "chunk"."""
        from embodied_ros.models.bitvla.runtime import load_runtime
        from embodied_ros.models.kit.bench import no_record_folders, reference_cases, whole

        no_record_folders("BitVLA", record)
        runtime = load_runtime(bundle, backend)
        return reference_cases(bundle, runtime, lambda ref, key: whole(lambda: self.model_case(runtime.model,
                                                                                               ref.inputs, key)),
                               observation_of=self.observation)

RECORDS = BitVLARecords()
