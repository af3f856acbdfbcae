"""`embodied-ros bench`'s cases: recorded inputs run stage by stage, with timings (cli/cmd_bench.py).

A family takes part with `bench_cases(bundle, record, backend) -> list[BenchCase]` in its package:
the cases of a record folder of that family, else of the bundle's own reference record. A case
holds what it runs (loaded once, by the family); `BenchCase.run()` gives the seconds of each stage
and the case's max abs action error against the record. Stages are named after the graph's nodes
(perception, prefix, action); a case that runs as one call is timed as "chunk", a whole episode
as "episode" (its chunks counted, so that chunk times stay per chunk).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from embodied_ros.models.kit import records
from embodied_ros.pipeline.types import Observation

Stages = Callable[[], tuple[dict[str, float], np.ndarray]]  # () -> (seconds per stage, actions)


@dataclass(frozen=True)
class BenchCase:
    name: str
    stages: Stages
    expected: np.ndarray
    chunks: int = 1  # action chunks one run makes (an episode of a world-action model makes several)

    def run(self) -> tuple[dict[str, float], float]:
        seconds, actions = self.stages()
        actions = np.asarray(actions)
        return seconds, float(np.abs(actions[..., :self.expected.shape[-1]] - self.expected).max())


def timed(*steps: tuple[str, Callable[[Any], Any]]) -> Stages:
    """Stages that run `steps` (name, function of the previous step's result) in order, the first fed
    None; the last result is the actions."""
    def stages():
        seconds, value = {}, None
        for name, step in steps:
            start = time.perf_counter()
            value = step(value)
            seconds[name] = time.perf_counter() - start
        return seconds, value

    return stages


def whole(run: Callable[[], np.ndarray]) -> Stages:
    """One call that gives the actions, timed as "chunk"."""
    return timed(("chunk", lambda _: run()))


def pipeline_stages(runtime, observation: Observation, noise: np.ndarray | None) -> Stages:
    """The graph's stages of a model without a world predictor, on a raw observation."""
    return timed(("perception", lambda _: runtime.encode(observation)),
                 ("prefix", lambda embeddings: runtime.build_prefix(embeddings, observation)),
                 ("action", lambda cache: runtime.act(cache, runtime.predict_world(cache, None), noise).actions))


def reference_cases(bundle, runtime, model_stages: Callable[[Any, str], Stages],
                    observation_of: Callable[..., Observation] = records.pipeline_observation,
                    keys: Callable[[Any], list[str]] = lambda record: list(record.expected),
                    expected_of: Callable[[Any, str], np.ndarray] = lambda record, key: record.expected[key]
                    ) -> list[BenchCase]:
    """The cases of the bundle's reference record: a pipeline record's through `runtime`'s stages, a
    model record's through `model_stages(record, key)`."""
    record = bundle.reference
    if record is None:
        raise ValueError(f"{bundle.path}: the bundle carries no reference record; pass --record DIR")
    cases = []
    for key in keys(record):
        if record.fields.get("kind") == "pipeline":
            observation = observation_of(record.inputs, record.fields[f"{key}_task"], key, runtime.spec.camera_names)
            stages = pipeline_stages(runtime, observation, record.noise.get(key))
        else:
            stages = model_stages(record, key)
        cases.append(BenchCase(key, stages, expected_of(record, key)))
    return cases


def no_record_folders(family: str, record) -> None:
    """Families whose bench reads only the bundle's own reference record refuse a --record."""
    if record is not None:
        raise ValueError(f"bench of {family} bundles runs the bundle's own reference record; leave out --record")
