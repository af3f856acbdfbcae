"""Recorded cases of a model family: running them (the `parity` command), a bundle's reference record
and its verification (`bundle verify`, and every converted bundle).

Tolerances on the max abs action error, by the weakest stored type of a bundle (flow-matching VLAs:
pi0.5, pi0, SmolVLA): f32 1e-4 (the parity requirement), f16 5e-3, bf16 5e-2, q8_0 1e-1, q4_k 3e-1.
The others are about 3x the worst error measured with every weight group stored in that type on
the random-weight pi0.5 reference records (actions up to ~5 in size): f16 1.2e-3, bf16 1.2e-2,
q8_0 3.1e-2, q4_k 8.9e-2 (pi05_small; the tiny records' widths are not multiples of 256, so
their "q4_k" falls back to q8_0). They catch a broken kernel or layout, not small accuracy changes.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from embodied_ros.heads import rtc
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation

TOLERANCES = {"f32": 1e-4, "f16": 5e-3, "bf16": 5e-2, "q8_0": 1e-1, "q4_k": 3e-1}
_STRENGTH = ("f32", "f16", "bf16", "q8_0", "q4_k")  # weakest last
CASES_FILE = "cases.npz"
CHECKPOINT_FOLDER = "checkpoint"
PIPELINE_CASES = "cases.json"


@dataclass(frozen=True)
class CaseResult:
    name: str  # "case0", ...
    max_abs_error: float
    tolerance: float
    detail: str = ""  # what else differed (prompt, token ids), empty when nothing did

    @property
    def passed(self) -> bool:
        return self.max_abs_error <= self.tolerance


def tolerance_for(stored_types, tolerances: Mapping[str, float] = TOLERANCES) -> float:
    weakest = max((t for t in stored_types if t in tolerances), key=_STRENGTH.index, default="f32")
    return tolerances[weakest]


def case_count(cases) -> int:
    names = cases.files if hasattr(cases, "files") else cases
    return len({name.split("_")[0] for name in names if name.startswith("case") and name.endswith("_noise")})


def recorded_images(inputs, key: str) -> tuple[np.ndarray, np.ndarray]:
    """A model record's case images in [-1, 1] (recorded in [0, 1]) and their camera mask."""
    return inputs[f"{key}_images"] * np.float32(2.0) - np.float32(1.0), inputs[f"{key}_image_masks"]


def rtc_case_settings(case: dict) -> rtc.RtcSettings | None:
    """The RTC settings of a recorded case (LeRobot's RTCConfig); None when RTC is off."""
    config = case.get("rtc_config")
    if not config or not config.get("enabled", True):
        return None
    return rtc.RtcSettings(config["prefix_attention_schedule"].lower(), float(config["max_guidance_weight"]),
                           int(config["execution_horizon"]))


def rtc_case_leftover(case: dict, cases, k: int, outputs: Mapping[int, np.ndarray]) -> np.ndarray | None:
    """The leftover of case k: recorded, or for a chained case this runtime's own earlier output."""
    source = case.get("prev_chunk_left_over")
    if source is None:
        return None
    if source.get("source") == "previous chain chunk":
        leftover = outputs[source["case"]][source["rows_from"]:]
        return rtc.fit_rows(leftover, source["normalized_to_rows"])
    return cases[f"case{k}_prev_chunk_left_over"]


def model_record_cases(model, folder: Path, tolerance: float, prefix_of: Callable[[Any, Any, str], Any]
                       ) -> Iterator[CaseResult]:
    """Model-space record of a flow-matching family: inputs + noise (+ a real-time chunking
    leftover) -> actions, compared in model space. `prefix_of(model, cases, "case{k}")` builds the
    case's prefix cache from its recorded inputs.

    A real-time chunking (RTC) record adds, per case, config.json `cases[k]` {rtc_config,
    inference_delay, prev_chunk_left_over, expect} and `case{k}_prev_chunk_left_over`; a chained
    case takes its leftover from this runtime's own output for the case it names, as a live loop
    would; a case that expects plain sampling must equal this runtime's plain sampling bit for bit.
    """
    recorded = json.loads((Path(folder) / "config.json").read_text()).get("cases", [])
    outputs: dict[int, np.ndarray] = {}
    with np.load(Path(folder) / CASES_FILE) as cases:
        for k in range(case_count(cases)):
            cache = prefix_of(model, cases, f"case{k}")
            expected, noise = cases[f"case{k}_actions"], cases[f"case{k}_noise"]
            case = recorded[k] if k < len(recorded) and isinstance(recorded[k], dict) else {}
            guidance = None
            if "rtc_config" in case:
                leftover = rtc_case_leftover(case, cases, k, outputs)
                guidance = rtc.chunk_guidance(rtc_case_settings(case), leftover, int(case["inference_delay"]),
                                              noise.shape, model.config.num_inference_steps)
            actions = model.sample_actions(cache, noise, guidance)[:, : expected.shape[1]]
            outputs[k] = actions
            error, detail = float(np.abs(actions - expected).max()), ""
            if case.get("expect") == "plain":
                plain = model.sample_actions(cache, noise)[:, : expected.shape[1]]
                if not np.array_equal(actions, plain):
                    error, detail = float("inf"), "RTC no-op case differs from plain sampling"
            yield CaseResult(f"case{k}", error, tolerance, detail)


def record_kind(folder: Path, detect: Callable[[Path], Any]) -> str | None:
    """"model", "pipeline" or None for a folder that is not a record of the family `detect` recognizes."""
    folder = Path(folder)
    if not (folder / CASES_FILE).is_file():
        return None
    checkpoint = folder / CHECKPOINT_FOLDER
    if checkpoint.is_dir() and detect(checkpoint) and (folder / PIPELINE_CASES).is_file():
        return "pipeline"
    if detect(folder):
        return "model"
    return None


def require_kind(folder: Path, kind: str | None, family: str) -> str:
    if kind is None:
        raise ValueError(f"{folder}: not a {family} record (needs {CASES_FILE} beside a checkpoint)")
    return kind


def checkpoint_of(folder: Path, kind: str | None) -> Path:
    return Path(folder) / CHECKPOINT_FOLDER if kind == "pipeline" else Path(folder)


def recorded_tasks(folder: Path) -> list[dict]:
    """The per-case entries (task, prompt) of a pipeline record's cases.json."""
    return json.loads((Path(folder) / PIPELINE_CASES).read_text())["cases"]


def pipeline_observation(inputs, task: str, key: str, camera_names, stamp_ns: int = 0) -> Observation:
    """The raw observation of one pipeline case: `{key}_{camera}_uint8` (absent = camera missing), `_state_raw`."""
    images = {name: inputs[f"{key}_{name}_uint8"] for name in camera_names if f"{key}_{name}_uint8" in inputs}
    return Observation(stamp_ns=stamp_ns, images=images, state=inputs[f"{key}_state_raw"], instruction=task)


def pipeline_cases(runtime, folder: Path, tolerance: float, prompt_of: Callable[[Observation], str]
                   ) -> Iterator[CaseResult]:
    """Raw record: uint8 images + raw state + task -> physical actions; the prompt (where cases.json records
    one) and the token ids (the valid ones, where the record has their mask) are checked too."""
    folder = Path(folder)
    recorded = recorded_tasks(folder)
    with np.load(folder / CASES_FILE) as cases:
        for k in range(case_count(cases)):
            observation = pipeline_observation(cases, recorded[k]["task"], f"case{k}", runtime.spec.camera_names, k)
            prompt = prompt_of(observation)
            tokens, mask = runtime.tokenizer.encode(prompt)
            expected_tokens = cases[f"case{k}_tokens"]
            if f"case{k}_token_mask" in cases.files:
                tokens, expected_tokens = tokens[mask], expected_tokens[cases[f"case{k}_token_mask"]]
            result = infer(runtime, observation, cases[f"case{k}_noise"])
            error = float(np.abs(result.actions - cases[f"case{k}_actions"]).max())
            problems = []
            if "prompt" in recorded[k] and prompt != recorded[k]["prompt"]:
                problems.append(f"prompt differs: {prompt!r}")
            if not np.array_equal(tokens, expected_tokens):
                problems.append("token ids differ")
            yield CaseResult(f"case{k}", error if not problems else float("inf"), tolerance, "; ".join(problems))


@contextlib.contextmanager
def converted_bundle(checkpoint: Path, quant: str, architecture: str, convert: Callable[..., Any],
                     tolerances: Mapping[str, float] = TOLERANCES):
    """(bundle, tolerance) of `checkpoint` converted to a temporary bundle stored as `quant` (a type such
    as "q8_0", or a plan such as "lm=q8_0,expert=q4_k"); the tolerance is `tolerance_for` its stored types."""
    from embodied_ros.bundle import QuantPlan, open_bundle

    plan = QuantPlan.parse(quant)
    with tempfile.TemporaryDirectory(prefix=f"{architecture}_parity_") as scratch:
        bundle_path = Path(scratch) / "policy.gguf"
        convert(checkpoint, bundle_path, plan)
        bundle = open_bundle(bundle_path, architecture=architecture)
        yield bundle, tolerance_for({bundle.tensor_info(name).qtype.lower() for name in bundle.weight_names},
                                    tolerances)


def reference_record(folder: Path, kind: str, tolerance: float, model_inputs: tuple[str, ...]):
    """The record a bundle carries: the folder's inputs, noise and the reference's actions. A model record
    keeps `model_inputs` per case, a pipeline record the raw state, the uint8 images and the tasks.
    A real-time chunking record is refused (its actions depend on a leftover chunk)."""
    from embodied_ros.bundle import ReferenceRecord

    folder = Path(folder)
    inputs, noise, expected, record_fields = {}, {}, {}, {"kind": kind}
    with np.load(folder / CASES_FILE) as cases:
        if any(name.endswith("_prev_chunk_left_over") for name in cases.files):
            raise ValueError(f"{folder}: a real-time chunking record cannot be a bundle's reference record "
                             "(its actions depend on a leftover chunk); use a plain record")
        for k in range(case_count(cases)):
            noise[f"case{k}"] = cases[f"case{k}_noise"]
            expected[f"case{k}"] = cases[f"case{k}_actions"]
            for name in model_inputs if kind == "model" else ("state_raw",):
                inputs[f"case{k}_{name}"] = cases[f"case{k}_{name}"]
            if kind == "pipeline":
                for name in cases.files:
                    if name.startswith(f"case{k}_") and name.endswith("_uint8"):
                        inputs[name] = cases[name]
    if kind == "pipeline":
        for k, case in enumerate(recorded_tasks(folder)):
            record_fields[f"case{k}_task"] = case["task"]
    return ReferenceRecord(inputs=inputs, expected=expected, tolerance=tolerance, noise=noise, fields=record_fields)


def verify_reference(bundle, load_runtime: Callable[[Any], Any], model_case: Callable[[Any, Any, str], np.ndarray]
                     ) -> tuple[float, float]:
    """Re-run a bundle's reference record: (max abs action error, recorded tolerance). `model_case(runtime,
    record, key)` gives a model record's actions; pipeline cases run the runtime's stages."""
    record = bundle.reference
    if record is None:
        raise ValueError(f"{bundle.path}: bundle has no reference record")
    runtime = load_runtime(bundle)
    worst = 0.0
    for key, expected in record.expected.items():
        if record.fields.get("kind") == "pipeline":
            observation = pipeline_observation(record.inputs, record.fields[f"{key}_task"], key,
                                               runtime.spec.camera_names)
            actions = infer(runtime, observation, record.noise[key]).actions
        else:
            actions = model_case(runtime, record, key)
        worst = max(worst, float(np.abs(actions - expected).max()))
    return worst, float(record.tolerance)


@dataclass(frozen=True)
class FlowRecords:
    """The recorded cases of a flow-matching VLA family (pi0.5, pi0, SmolVLA), as data; the family's
    package exposes its methods as the `parity` command's, `bundle verify`'s and its converter's hooks.

    family        its name in messages ("pi0.5")
    package       its package: `convert.detect` / `convert.convert` and `runtime.load_runtime` are taken from
                  there when used (so neither module imports this record spec's user back)
    model_inputs  a model record's per-case inputs: images ([0, 1], model order), image_masks, tokens,
                  token_mask, then what the model's build_prefix takes after them (pi0, SmolVLA: state)

    Record layouts (test/data): a model record is config.json + model.safetensors + cases.npz with, per
    case k, `case{k}_<model input>`, `_noise` and model-space `_actions` (a real-time chunking record adds
    each case's leftover and settings: `model_record_cases`); a pipeline record is checkpoint/ (a LeRobot
    save) + cases.json (tasks, and the prompts where the family's prompt is more than the task) +
    cases.npz with raw inputs `case{k}_{camera}_uint8` (absent = camera missing), `_state_raw`, `_noise`,
    the reference's `_tokens` (and `_token_mask`) and physical-unit `_actions`.
    """

    family: str
    package: str
    model_inputs: tuple[str, ...]

    def _module(self, name: str):
        return importlib.import_module(f"{self.package}.{name}")

    def record_kind(self, folder: str | Path) -> str | None:
        """"model", "pipeline" or None for a folder that is not a record of this family."""
        return record_kind(Path(folder), self._module("convert").detect)

    def recognizes_fixture(self, path: str | Path) -> bool:
        return self.record_kind(path) is not None

    # ---- running cases ---------------------------------------------------------------------

    def model_prefix(self, model, inputs, key: str, image_tokens: np.ndarray | None = None):
        """The prefix cache of one recorded case; inputs holds `{key}_images`, ... as recorded.
        image_tokens: the case's vision output, where it is already computed."""
        images, mask = recorded_images(inputs, key)
        if image_tokens is None:
            image_tokens = model.image_tokens(images, mask)
        extras = tuple(inputs[f"{key}_{name}"] for name in self.model_inputs[4:])
        return model.build_prefix(image_tokens, mask, inputs[f"{key}_tokens"], inputs[f"{key}_token_mask"], *extras)

    def model_case(self, model, inputs, key: str, action_dim: int, noise: np.ndarray | None = None) -> np.ndarray:
        """Model-space actions of one recorded case (its noise `{key}_noise` unless given)."""
        noise = inputs[f"{key}_noise"] if noise is None else noise
        return model.sample_actions(self.model_prefix(model, inputs, key), noise)[:, :action_dim]

    def run_cases(self, runtime, folder: Path, tolerance: float = TOLERANCES["f32"]) -> Iterator[CaseResult]:
        kind = require_kind(folder, self.record_kind(folder), self.family)
        if kind == "model":
            return model_record_cases(runtime.model, folder, tolerance, self.model_prefix)
        return pipeline_cases(runtime, folder, tolerance, runtime.prompt)

    def run_fixture_parity(self, path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
        """Convert the record's checkpoint to a temporary bundle stored as `quant` (a type such as
        "q8_0", or a plan such as "lm=q8_0,expert=q4_k") and run every case against the record."""
        folder = Path(path)
        checkpoint = checkpoint_of(folder, self.record_kind(folder))
        architecture = self.package.rsplit(".", 1)[1]
        with converted_bundle(checkpoint, quant, architecture, self._module("convert").convert) as (bundle, tolerance):
            return list(self.run_cases(self._module("runtime").load_runtime(bundle, backend), folder, tolerance))

    # ---- a bundle's reference record -----------------------------------------------------------

    tolerance_for = staticmethod(tolerance_for)

    def reference_record(self, folder: Path, tolerance: float):
        """The record a bundle carries: the folder's inputs, noise and the reference's actions."""
        kind = require_kind(folder, self.record_kind(folder), self.family)
        return reference_record(folder, kind, tolerance, self.model_inputs)

    def verify_reference(self, bundle, backend: str = "numba") -> tuple[float, float]:
        """Re-run a bundle's reference record: (max abs action error, recorded tolerance)."""
        load_runtime = self._module("runtime").load_runtime

        def record_case(runtime, record, key: str) -> np.ndarray:
            return self.model_case(runtime.model, record.inputs, key, record.expected[key].shape[1], record.noise[key])

        return verify_reference(bundle, lambda b: load_runtime(b, backend), record_case)

    # ---- `embodied-ros bench` (models/kit/bench.py) --------------------------------------------

    def model_stages(self, model, inputs, key: str, noise: np.ndarray):
        """A model record's case as the perception, prefix and action stages."""
        from embodied_ros.models.kit.bench import timed

        images, mask = recorded_images(inputs, key)
        return timed(("perception", lambda _: model.image_tokens(images, mask)),
                     ("prefix", lambda tokens: self.model_prefix(model, inputs, key, tokens)),
                     ("action", lambda cache: model.sample_actions(cache, noise)))

    def bench_cases(self, bundle, record: Path | None = None, backend: str = "numba") -> list:
        """The cases of `record` (a record folder of this family), else of the bundle's reference record.
        A real-time chunking record's cases run plainly (no leftover chunk)."""
        from embodied_ros.models.kit.bench import BenchCase, pipeline_stages, reference_cases

        runtime = self._module("runtime").load_runtime(bundle, backend)
        if record is None:
            return reference_cases(bundle, runtime, lambda ref, key: self.model_stages(
                runtime.model, ref.inputs, key, ref.noise[key]))
        folder = Path(record)
        kind = require_kind(folder, self.record_kind(folder), self.family)
        tasks = recorded_tasks(folder) if kind == "pipeline" else []
        with np.load(folder / CASES_FILE) as arrays:
            loaded = {name: arrays[name] for name in arrays.files}
        cases = []
        for k in range(case_count(loaded)):
            key, noise = f"case{k}", loaded[f"case{k}_noise"]
            if kind == "pipeline":
                observation = pipeline_observation(loaded, tasks[k]["task"], key, runtime.spec.camera_names, k)
                stages = pipeline_stages(runtime, observation, noise)
            else:
                stages = self.model_stages(runtime.model, loaded, key, noise)
            cases.append(BenchCase(key, stages, loaded[f"{key}_actions"]))
        return cases
