"""LingBot-VA as LeRobot 0.6.1 implements it (bundle architecture "lingbot_va"), and Wan block records.

Family entry points (see embodied_ros/bundle/__init__.py and pipeline/stages.py):
  load_runtime(bundle, backend)          -> LingbotVARuntime (encode, build_prefix, world_episode,
                                            predict_world, act)
  spec_of(bundle)                        -> its ModelSpec from the bundle's metadata
  verify_reference(bundle, backend)      -> (max abs error, tolerance) of the bundle's reference record
  bench_cases(bundle, record, backend)   -> the `bench` command's cases (its reference episode)
  recognizes_fixture(path), run_fixture_parity(path, quant)   lerobot records and Wan block records
                                            for `embodied-ros parity`
  convert.detect / convert.convert       checkpoint folders and block records -> bundles
"""

from __future__ import annotations

from pathlib import Path

from embodied_ros.models.lingbot_va.config import ARCHITECTURE


def _model_bundle(bundle):
    """The bundle, if it holds a LingBot-VA model in lerobot's layout (one that runs in the graph)."""
    from embodied_ros.models.lingbot_va import lerobot_bundle
    from embodied_ros.models.lingbot_va.convert import BLOCKS_ONLY

    if BLOCKS_ONLY in bundle.config:
        raise ValueError(f"{bundle.path}: holds bare Wan blocks (a parity record), not a world-action model")
    if not lerobot_bundle.is_bundle(bundle):
        raise ValueError(f"{bundle.path}: not a LingBot-VA bundle in lerobot's layout (convert the checkpoint again)")
    return bundle


def load_runtime(bundle, backend: str = "numba"):
    """The world-action runtime of a lingbot_va bundle (read by `pipeline.stages.load_runtime`)."""
    from embodied_ros.models.lingbot_va.runtime import load_runtime as load

    return load(_model_bundle(bundle), backend)


def spec_of(bundle):
    """The ModelSpec of a lingbot_va bundle from its metadata (no weights read)."""
    from embodied_ros.models.lingbot_va.runtime import model_spec

    return model_spec(_model_bundle(bundle))


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    """Run the bundle's reference record: (largest max-abs error over its cases, tolerance). A
    blocks-only bundle reruns its recorded Wan block cases; a model its reference episode."""
    from embodied_ros.models.lingbot_va import lerobot_bundle
    from embodied_ros.models.lingbot_va.convert import BLOCKS_ONLY
    from embodied_ros.models.lingbot_va.parity import run_block_reference

    if BLOCKS_ONLY not in bundle.config:
        return lerobot_bundle.verify_reference(_model_bundle(bundle), backend)
    results = run_block_reference(bundle, backend)
    return max(r.max_abs_error for r in results), results[0].tolerance


def bench_cases(bundle, record=None, backend: str = "numba") -> list:
    """`embodied-ros bench`: the bundle's reference episode, each run from a fresh episode."""
    from embodied_ros.models.kit.bench import BenchCase, no_record_folders, timed
    from embodied_ros.models.lingbot_va.lerobot_bundle import reference_episode

    no_record_folders("LingBot-VA", record)
    run, expected, chunks = reference_episode(_model_bundle(bundle), backend)
    return [BenchCase("episode", timed(("episode", lambda _: run())), expected, chunks)]


def recognizes_fixture(path: str | Path) -> bool:
    """`embodied-ros parity`: True for a Wan block record folder (block.safetensors + cases) or a
    lerobot LingBot-VA record (cases.json, cases.npz, checkpoint/)."""
    from embodied_ros.models.lingbot_va.lerobot_bundle import recognizes_record
    from embodied_ros.models.lingbot_va.parity import recognizes_fixture as recognizes

    return recognizes(Path(path)) or recognizes_record(Path(path))


def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list:
    """`embodied-ros parity`: the record's weights stored as `quant`, every case run; CaseResults."""
    from embodied_ros.models.lingbot_va.lerobot_bundle import recognizes_record, run_record_parity
    from embodied_ros.models.lingbot_va.parity import run_fixture_parity as run

    if recognizes_record(Path(path)):
        return run_record_parity(Path(path), quant, backend)
    return run(Path(path), quant, backend)


__all__ = ["ARCHITECTURE", "load_runtime", "spec_of", "recognizes_fixture",
           "run_fixture_parity", "verify_reference", "bench_cases"]
