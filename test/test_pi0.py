"""pi0 (LeRobot PI0Policy) against its PyTorch reference records: model-space records of two shapes,
the intermediate taps, and a LeRobot-layout checkpoint from raw inputs to physical actions."""

import json
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from embodied_ros.bundle import families, open_bundle
from embodied_ros.heads import action_time_expert
from embodied_ros.models.pi0 import RECORDS
from embodied_ros.models.pi0.config import Pi0Config
from embodied_ros.models.pi0.convert import convert, read_checkpoint
from embodied_ros.models.pi0.model import Pi0Model
from embodied_ros.models.kit.flow_vla import newline_prompt
from embodied_ros.models.pi0.runtime import load_runtime
from embodied_ros.models.pi0.weights import from_lerobot
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "test" / "data"
TINY, OTHER_SHAPE, CHECKPOINT = DATA / "pi0_tiny", DATA / "extra" / "pi0_three_cam_gqa", DATA / "pi0_tiny_checkpoint"
TOLERANCE = 1e-4


@lru_cache(maxsize=None)
def record(folder: Path):
    config = Pi0Config.from_fixture_json(json.loads((folder / "config.json").read_text()))
    with np.load(folder / "cases.npz") as cases:
        arrays = {name: cases[name] for name in cases.files}
    return config, from_lerobot(load_file(str(folder / "model.safetensors"))), arrays


@lru_cache(maxsize=None)
def model(folder: Path, backend: str) -> Pi0Model:
    config, weights, _ = record(folder)
    return Pi0Model(config, weights, backend)


def run_case(m: Pi0Model, cases: dict, k: int, compact: bool = True) -> np.ndarray:
    images = cases[f"case{k}_images"] * np.float32(2.0) - np.float32(1.0)
    mask = cases[f"case{k}_image_masks"]
    cache = m.build_prefix(m.image_tokens(images, mask), mask, cases[f"case{k}_tokens"], cases[f"case{k}_token_mask"],
                           cases[f"case{k}_state"], compact=compact)
    return m.sample_actions(cache, cases[f"case{k}_noise"])[:, : cases[f"case{k}_actions"].shape[1]]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("folder", [TINY, OTHER_SHAPE], ids=["tiny", "three_cam_gqa"])
def test_every_case_within_tolerance(folder, backend):
    _, _, cases = record(folder)
    for k in range(3):
        error = np.abs(run_case(model(folder, backend), cases, k) - cases[f"case{k}_actions"]).max()
        assert error < TOLERANCE, f"case {k}: max abs action error {error:.3g}"


@pytest.mark.parametrize("folder", [TINY, OTHER_SHAPE], ids=["tiny", "three_cam_gqa"])
def test_masked_prefix_oracle_matches_the_compacted_prefix(folder):
    _, _, cases = record(folder)
    m = model(folder, "numba")
    for k in range(3):
        masked, compact = run_case(m, cases, k, compact=False), run_case(m, cases, k)
        assert np.abs(masked - cases[f"case{k}_actions"]).max() < TOLERANCE
        np.testing.assert_allclose(compact, masked, atol=1e-5)


def test_suffix_taps_of_case0():
    """State token and action tokens at step 0, last expert layer's output for both, velocity at t=1."""
    config, _, cases = record(TINY)
    m = model(TINY, "numpy")
    images = cases["case0_images"] * np.float32(2.0) - np.float32(1.0)
    mask = cases["case0_image_masks"]
    prefix = m.prefix_pass(m.image_tokens(images, mask), mask, cases["case0_tokens"], cases["case0_token_mask"])[0]
    state = m.padded_state(cases["case0_state"])
    embeds = cases["case0_suffix_embeds_step0"]
    state_token = m.ks.linear(state[None, :], m.weights["state_in.weight"], m.weights["state_in.bias"])
    np.testing.assert_allclose(state_token[0], embeds[0], atol=1e-5)
    tokens = action_time_expert.action_tokens(m.ks, m.weights, m.action_part, cases["case0_noise"], m.step_time_bias[0])
    np.testing.assert_allclose(tokens, embeds[1:], atol=1e-5)

    keys, values, state_hidden = m.state_pass(prefix, cases["case0_state"], full_last_layer=True)
    hidden = cases["case0_suffix_hidden_step0"]
    np.testing.assert_allclose(state_hidden[0], hidden[0], atol=1e-4)
    cache = action_time_expert.append_state_token(prefix, keys, values)
    assert cache.n_valid == prefix.n_valid + 1  # the first action token sits one past the state token
    x, rope = tokens, m.suffix_rope(cache)
    for index, w in enumerate(m.expert_layers):
        x = action_time_expert.decoder_layer(m.ks, config.expert, w, x, cache.keys[index], cache.values[index],
                                             cache.key_bias, rope)
    np.testing.assert_allclose(x, hidden[1:], atol=1e-4)
    np.testing.assert_allclose(m.velocity(cache, cases["case0_noise"], 0), cases["case0_velocity_step0"], atol=1e-5)


def test_the_state_moves_the_actions():
    _, _, cases = record(TINY)
    m = model(TINY, "numba")
    changed = dict(cases, case0_state=cases["case0_state"] + np.float32(0.5))
    assert np.abs(run_case(m, changed, 0) - cases["case0_actions"]).max() > 1e-2


def test_lerobot_checkpoint_converts_and_reproduces_raw_actions_from_raw_inputs():
    results = RECORDS.run_fixture_parity(CHECKPOINT)
    assert [r.name for r in results] == ["case0", "case1", "case2"]
    for result in results:
        assert result.detail == "" and result.max_abs_error < TOLERANCE, (result.name, result.max_abs_error)


def test_checkpoint_reads_mean_std_stats_names_and_tokenizer():
    checkpoint = read_checkpoint(CHECKPOINT / "checkpoint")
    assert set(checkpoint.stats["state"]) == {"mean", "std"} and set(checkpoint.stats["action"]) == {"mean", "std"}
    assert checkpoint.config.camera_names == ("base_0_rgb", "wrist_0_rgb")
    assert checkpoint.config.tokenizer_max_length == 32 and checkpoint.tokenizer is not None
    assert (checkpoint.config.lm.num_heads, checkpoint.config.vision.num_heads) == (8, 4)  # from cases.json


def test_bundle_carries_and_reruns_its_reference_record(tmp_path):
    output = tmp_path / "pi0.gguf"
    convert(TINY, output, reference=TINY)
    bundle = open_bundle(output, architecture="pi0")
    error, tolerance = families.verify_reference(bundle, "numba")
    assert error < tolerance == TOLERANCE


def test_shipped_bundle_runs_an_observation_and_refuses_one_without_state():
    runtime = load_runtime(open_bundle(ROOT / "bundles" / "pi0_tiny.gguf"))
    images = {name: np.full((64, 64, 3), 128, np.uint8) for name in runtime.spec.camera_names}
    state = np.zeros(runtime.config.state_dim, np.float32)
    result = infer(runtime, Observation(1, images, state, "pick up the cube"))
    assert result.actions.shape == (runtime.spec.chunk_size, len(runtime.spec.action_names))
    assert np.all(np.isfinite(result.actions))
    with pytest.raises(ValueError, match="no state"):
        infer(runtime, Observation(2, images, None, "pick up the cube"))


def test_prompt_ends_with_one_newline():
    assert newline_prompt("stack the block") == "stack the block\n"
    assert newline_prompt("stack the block\n") == "stack the block\n"


def test_spec_comes_from_the_bundle_metadata_alone(monkeypatch):
    from embodied_ros.bundle.reader import Bundle
    from embodied_ros.pipeline.stages import load_runtime as load_any, read_spec

    bundles = [ROOT / "bundles" / name for name in ("pi0_tiny.gguf", "pi05_tiny.gguf", "lingbot_va_small.gguf")]
    specs = [load_any(path).spec for path in bundles]

    def no_weights(*args, **kwargs):
        raise AssertionError("reading a spec mapped the weights")

    monkeypatch.setattr(Bundle, "weights", no_weights)
    monkeypatch.setattr(Bundle, "weight", no_weights)
    assert [read_spec(path) for path in bundles] == specs


def test_flow_solver_runs_either_time_direction_and_guidance_sees_each_step():
    from embodied_ros.heads import flow

    x0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(flow.euler_solve(lambda x, step: np.full_like(x, 2.0), x0, 4, start=0.0, end=1.0),
                               x0 + 2.0, atol=1e-6)  # dx/dt = 2 over t in [0, 1]
    assert flow.euler_times(4, 0.0, 1.0).tolist() == [0.0, 0.25, 0.5, 0.75]
    seen = []

    def guidance(x, v, step):
        seen.append(step)
        return v * np.float32(0.0)

    np.testing.assert_array_equal(flow.euler_solve(lambda x, step: x, x0, 3, guidance=guidance), x0)
    assert seen == [0, 1, 2]


def test_up_on_the_pi0_config_publishes_action_chunks(tmp_path):
    import os
    import subprocess

    from domains import next_domain

    report_path = tmp_path / "report.json"
    command = [sys.executable, "-m", "embodied_ros.cli.main", "up", str(ROOT / "config" / "pi0.yaml"), "--duration",
               "6", "--composed", "--domain-id", str(next_domain()), "--report-json", str(report_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["stages"]["action"]["runs"] > 5 and report["stages"]["action"]["rate_hz"] > 3
    assert report["commands"]["commands"] > 30
