"""Real-time chunking: LeRobot 0.6.1's RTC records of single and chained cases (test/data/*_rtc_*, and in
other shapes test/data/extra/*_rtc_*: pi0's and SmolVLA's), each run by the family that recognizes it;
for every flow-matching family (pi0.5 too), the runtime's act with a leftover in physical units and the
graph's continuation of each chunk."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from embodied_ros.deploy.continuation import ChunkContinuer, DelayEstimate
from embodied_ros.graph.lockstep import LockstepGraph
from embodied_ros.heads import rtc
from embodied_ros.models.kit import records
from embodied_ros.bundle.families import family as family_package, known_families
from embodied_ros.node_infra.config import load_config
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import load_runtime, read_spec
from embodied_ros.pipeline.types import ChunkContinuation, Observation
from domains import next_domain

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "test" / "data"
RTC_FOLDERS = sorted(folder.relative_to(DATA).as_posix()  # RTC records of single and chained cases
                     for folder in [*DATA.glob("*_rtc_*/"), *DATA.glob("extra/*_rtc_*/")]
                     if all("kind" in case for case in json.loads((folder / "config.json").read_text())["cases"]))
RECORDS = {name: package.RECORDS for name in RTC_FOLDERS  # each RTC record with the records of its family
           for package in map(family_package, known_families()) if package.recognizes_fixture(DATA / name)}
TOLERANCE = 1e-4


def recorded_cases(name):
    return json.loads((DATA / name / "config.json").read_text())["cases"]


@pytest.mark.parametrize("name", RECORDS)
def test_parity_within_tolerance_and_no_ops_equal_plain_sampling_bit_for_bit(name):
    """Through a converted bundle, as `embodied-ros parity` runs it; a no-op case that differs from
    this runtime's plain sampling at all is reported as an infinite error; the chain continues this
    runtime's own chunks."""
    results = RECORDS[name].run_fixture_parity(DATA / name)
    cases = recorded_cases(name)
    assert len(results) == len(cases)
    for result in results:
        assert result.max_abs_error < TOLERANCE, f"{result.name}: {result.max_abs_error:.3g} {result.detail}"
    assert sum(case["expect"] == "plain" for case in cases) >= 3
    assert sum(case["kind"] == "chain" for case in cases) >= 3
    assert {case["rtc_config"]["prefix_attention_schedule"] for case in cases} == {"LINEAR", "ZEROS", "ONES", "EXP"}


@pytest.mark.parametrize("name", RECORDS)
def test_every_recorded_step_guides_as_lerobot_did(name):
    """From LeRobot's own solver state and plain velocity of each step, the guidance gives its
    guided velocity bit for bit (weights: LeRobot's; exp's expm1 may differ by one unit)."""
    with np.load(DATA / name / "cases.npz") as arrays:
        cases = {key: arrays[key] for key in arrays.files}
    checked = 0
    for k, case in enumerate(recorded_cases(name)):
        if not case["guidance_applied"] or case["kind"] == "chain":
            continue
        noise = cases[f"case{k}_noise"]
        guidance = rtc.chunk_guidance(records.rtc_case_settings(case), cases[f"case{k}_prev_chunk_left_over"],
                                      case["inference_delay"], noise.shape, cases[f"case{k}_v_base_steps"].shape[0])
        recorded_weights = cases[f"case{k}_prefix_weights"]
        if not recorded_weights.any():
            assert guidance is None
            continue
        np.testing.assert_allclose(guidance.weights[:, 0], recorded_weights, rtol=0, atol=6e-8, err_msg=name)
        np.testing.assert_array_equal(guidance.step_weights, cases[f"case{k}_guidance_weights"])
        guidance = dataclasses.replace(guidance, weights=recorded_weights[:, None])
        xs, plain, guided = (cases[f"case{k}_{key}"] for key in ("x_steps", "v_base_steps", "v_guided_steps"))
        for step in range(plain.shape[0]):
            np.testing.assert_array_equal(guidance(xs[step], plain[step], step), guided[step],
                                          err_msg=f"{name} case {k} step {step}")
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("name", RECORDS)
def test_rtc_record_is_refused_as_a_bundle_reference(name):
    with pytest.raises(ValueError, match="real-time chunking"):
        RECORDS[name].reference_record(DATA / name, TOLERANCE)


# ---- the runtimes and the graph ------------------------------------------------------------

BUNDLES = {name: Path(load_config(name).bundle) for name in known_families()  # every flow-matching family
           if read_spec(load_config(name).bundle).real_time_chunking}
INSTRUCTION = "put the cup on the plate"
SEED = 5


def family_inputs(runtime, seed=42):
    rng = np.random.default_rng(seed)
    height, width = runtime.spec.image_size
    images = {name: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for name in runtime.spec.camera_names}
    state = rng.uniform(-1.0, 1.0, len(runtime.spec.state_names)).astype(np.float32)
    return images, state


@pytest.fixture(scope="module", params=list(BUNDLES))
def family(request):
    runtime = load_runtime(BUNDLES[request.param])
    return request.param, runtime, family_inputs(runtime)


def test_act_continues_a_leftover_given_in_physical_units(family):
    """The runtime's act takes the leftover in physical units: a leftover equal to the plain chunk's
    own rows keeps those rows (they are what the solve is pulled to), a continuation that guides
    nothing is plain sampling bit for bit."""
    _, runtime, (images, state) = family
    observation = Observation(7, images, state, INSTRUCTION)
    prefix = runtime.build_prefix(runtime.encode(observation), observation)
    noise = stage_noise(SEED, "action", 0, runtime.spec.noise_shape)
    plain = runtime.act(prefix, None, noise).actions
    settings = rtc.RtcSettings("linear", 10.0, 8)
    nothing = ChunkContinuation(None, 2, settings)
    np.testing.assert_array_equal(runtime.act(prefix, None, noise, nothing).actions, plain)
    other = runtime.act(prefix, None, stage_noise(SEED + 1, "action", 0, runtime.spec.noise_shape)).actions
    guided = runtime.act(prefix, None, noise, ChunkContinuation(other[3:], 2, settings)).actions
    assert np.abs(guided[:2] - other[3:5]).max() < 0.5 * np.abs(plain[:2] - other[3:5]).max()


def test_lockstep_graph_continues_each_chunk_as_the_contract_says(family):
    """Lock-step with `rtc.enabled` on a pi0.5 / pi0 / SmolVLA bundle: each step's chunk equals a
    direct runtime call continuing the previous chunk (deploy/continuation.py), so the run is as
    reproducible as without it."""
    name, runtime, (images, state) = family
    config = load_config(None, {"bundle": str(BUNDLES[name]), "stages.noise_seed": SEED, "rtc.enabled": True,
                                "rtc.delay": "fixed", "rtc.delay_rows": 2, "rtc.execution_horizon": 8})
    with LockstepGraph(config, domain_id=next_domain(), timeout_s=120) as graph:
        outputs = [graph.step(images, state, instruction=INSTRUCTION) for _ in range(3)]
    continuer = ChunkContinuer(config.rtc.settings, DelayEstimate(fixed_rows=2))
    for step, output in enumerate(outputs):
        assert output.chunk is not None, f"step {step}: no chunk; input problem: {output.input_problem!r}"
        observation = Observation(output.stamp_ns, images, state, INSTRUCTION)
        prefix = runtime.build_prefix(runtime.encode(observation), observation)
        noise = stage_noise(SEED, "action", step, runtime.spec.noise_shape)
        continuation = continuer.continuation(output.stamp_ns)
        assert (continuation.leftover is None) == (step == 0)
        expected = runtime.act(prefix, None, noise, continuation)
        continuer.published(expected, output.stamp_ns)
        np.testing.assert_allclose(output.chunk.actions, expected.actions, atol=1e-5, rtol=0)
        if step > 0:
            assert np.abs(expected.actions - runtime.act(prefix, None, noise).actions).max() > 1e-3
