"""The `bench` command's hook: recorded pi0.5 cases, each run stage by stage with timings.

`bench_cases(bundle, record)` reads the cases of a record folder (either layout, models/kit/records.py)
or, without one, the bundle's own reference record; each `BenchCase.run(runtime)` gives the
seconds of each stage and the case's max abs action error against the record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from embodied_ros.models.kit import records
from embodied_ros.pipeline.types import Observation

STAGES = ("perception", "prefix", "action")


@dataclass(frozen=True)
class BenchCase:
    name: str
    stages: Callable[[Any], tuple[dict[str, float], np.ndarray]]  # runtime -> (stage seconds, actions)
    expected: np.ndarray

    def run(self, runtime) -> tuple[dict[str, float], float]:
        seconds, actions = self.stages(runtime)
        return seconds, float(np.abs(actions[:, :self.expected.shape[1]] - self.expected).max())


def _model_stages(images, camera_mask, tokens, token_mask, noise):
    def stages(runtime):
        model, marks = runtime.model, [time.perf_counter()]
        image_tokens = model.image_tokens(images * np.float32(2.0) - np.float32(1.0), camera_mask)
        marks.append(time.perf_counter())
        cache = model.build_prefix(image_tokens, camera_mask, tokens, token_mask)
        marks.append(time.perf_counter())
        actions = model.sample_actions(cache, noise)
        marks.append(time.perf_counter())
        return dict(zip(STAGES, np.diff(marks))), actions

    return stages


def _pipeline_stages(images, state, task, noise):
    def stages(runtime):
        observation = Observation(0, {name: images[name] for name in runtime.spec.camera_names if name in images},
                                  state, task)
        marks = [time.perf_counter()]
        embeddings = runtime.encode(observation)
        marks.append(time.perf_counter())
        prefix = runtime.build_prefix(embeddings, observation)
        marks.append(time.perf_counter())
        result = runtime.act(prefix, runtime.predict_world(prefix, None), noise)
        marks.append(time.perf_counter())
        return dict(zip(STAGES, np.diff(marks))), result.actions

    return stages


def bench_cases(bundle, record: Path | None = None) -> list[BenchCase]:
    """The cases of `record` (a pi0.5 record folder), else of the bundle's reference record."""
    if record is not None:
        return _folder_cases(Path(record))
    reference = bundle.reference
    if reference is None:
        raise ValueError(f"{bundle.path}: the bundle carries no reference record; pass --record DIR")
    cases = []
    for key, expected in reference.expected.items():
        inputs = {name[len(key) + 1:]: value for name, value in reference.inputs.items() if name.startswith(key + "_")}
        if reference.fields.get("kind") == "pipeline":
            images = {name[:-len("_uint8")]: value for name, value in inputs.items() if name.endswith("_uint8")}
            stages = _pipeline_stages(images, inputs["state_raw"], reference.fields[f"{key}_task"],
                                      reference.noise[key])
        else:
            stages = _model_stages(inputs["images"], inputs["image_masks"], inputs["tokens"], inputs["token_mask"],
                                   reference.noise[key])
        cases.append(BenchCase(key, stages, expected))
    return cases


def _folder_cases(folder: Path) -> list[BenchCase]:
    from embodied_ros.models.pi05 import RECORDS

    kind = RECORDS.record_kind(folder)
    if kind is None:
        raise ValueError(f"{folder}: not a pi0.5 record (needs {records.CASES_FILE} beside a checkpoint)")
    tasks = [case["task"] for case in json.loads((folder / "cases.json").read_text())["cases"]] if kind == "pipeline" \
        else []
    cases = []
    with np.load(folder / records.CASES_FILE) as arrays:
        loaded = {name: arrays[name] for name in arrays.files}
    for k in range(sum(1 for name in loaded if name.startswith("case") and name.endswith("_noise"))):
        prefix = f"case{k}_"
        if kind == "pipeline":
            images = {name[len(prefix):-len("_uint8")]: value for name, value in loaded.items()
                      if name.startswith(prefix) and name.endswith("_uint8")}
            stages = _pipeline_stages(images, loaded[prefix + "state_raw"], tasks[k], loaded[prefix + "noise"])
        else:
            stages = _model_stages(loaded[prefix + "images"], loaded[prefix + "image_masks"], loaded[prefix + "tokens"],
                                   loaded[prefix + "token_mask"], loaded[prefix + "noise"])
        cases.append(BenchCase(f"case{k}", stages, loaded[prefix + "actions"]))
    return cases
