"""The asynchronous-execution contract of real-time chunking (deploy/continuation.py), without ROS."""

import numpy as np
import pytest

from embodied_ros.deploy import CommandLogic, JointLimits, TimedChunk
from embodied_ros.deploy.continuation import ChunkContinuer, DelayEstimate, delay_rows, leftover, merge
from embodied_ros.heads.rtc import RtcSettings
from embodied_ros.pipeline.types import ActionChunkResult

PERIOD_NS = 20_000_000
STAMP_NS = 1_000_000_000


def chunk_result(stamp_ns=STAMP_NS, rows=10, columns=3):
    actions = np.arange(rows * columns, dtype=np.float32).reshape(rows, columns)
    return ActionChunkResult(stamp_ns, actions, PERIOD_NS / 1e9, ("a", "b", "c")[:columns])


def test_leftover_is_what_the_executing_chunk_still_targets_from_the_new_observation_on():
    executing = chunk_result()
    np.testing.assert_array_equal(leftover(executing, STAMP_NS + 3 * PERIOD_NS), executing.actions[3:])
    np.testing.assert_array_equal(leftover(executing, STAMP_NS), executing.actions)
    half = leftover(executing, STAMP_NS + 3 * PERIOD_NS + PERIOD_NS // 2)  # between rows: interpolated
    np.testing.assert_allclose(half, (executing.actions[3:-1] + executing.actions[4:]) / 2)
    assert leftover(executing, STAMP_NS + 10 * PERIOD_NS) is None  # ran out


def test_delay_is_the_rows_whose_instants_passed_and_the_measured_estimate_is_the_recent_maximum():
    assert [delay_rows(ns, PERIOD_NS) for ns in (0, 1, PERIOD_NS, PERIOD_NS + 1, -5)] == [0, 1, 1, 2, 0]
    measured = DelayEstimate(window=3)
    assert measured.rows == 0
    for latency_ns in (45_000_000, 10_000_000, 5_000_000):
        measured.observe(latency_ns, PERIOD_NS)
    assert measured.rows == 3
    measured.observe(1_000_000, PERIOD_NS)  # the 45 ms one left the window
    assert measured.rows == 1
    fixed = DelayEstimate(fixed_rows=4)
    fixed.observe(200_000_000, PERIOD_NS)
    assert fixed.rows == 4
    with pytest.raises(ValueError, match="fixed inference delay"):
        DelayEstimate(fixed_rows=-1)


def test_merge_drops_the_rows_whose_instants_passed_before_landing():
    timed = TimedChunk(STAMP_NS, PERIOD_NS, np.arange(10, dtype=np.float64)[:, None])
    merged = merge(timed, STAMP_NS + 2 * PERIOD_NS + 1)  # landed 40 ms + 1 ns after the observation: d = 3
    assert merged.first_row == 2 and merged.stamp_ns == timed.stamp_ns  # rows 0, 1 were due before it landed
    assert merged.sample(STAMP_NS + PERIOD_NS)[0] == 2.0  # never executed
    for t_ns in range(STAMP_NS + 3 * PERIOD_NS, timed.end_ns + 1, PERIOD_NS // 4):  # from row 2's instant on: as is
        np.testing.assert_array_equal(merged.sample(t_ns), timed.sample(t_ns))
    assert merge(timed, STAMP_NS + PERIOD_NS).first_row == 0  # row 0 is due at the landing itself
    assert merge(timed, STAMP_NS).first_row == 0
    assert merge(timed, timed.end_ns + PERIOD_NS).first_row == 9  # landed after its end: ran out anyway


def test_controller_logic_runs_a_merged_chunk_and_still_takes_newer_observations():
    logic = CommandLogic(JointLimits.from_lists(1, (), (), ()), PERIOD_NS)
    logic.observe_positions(np.zeros(1))
    old = TimedChunk(STAMP_NS, PERIOD_NS, np.full((10, 1), 1.0))
    logic.accept_chunk(merge(old, STAMP_NS + 5 * PERIOD_NS), STAMP_NS + 5 * PERIOD_NS)
    new = TimedChunk(STAMP_NS + PERIOD_NS, PERIOD_NS, np.arange(10, dtype=np.float64)[:, None])
    landed_ns = STAMP_NS + 3 * PERIOD_NS
    logic.accept_chunk(merge(new, landed_ns), landed_ns)  # its older-stamped predecessor does not shut it out
    assert logic.tick(landed_ns).positions[0] == 1.0  # row 1, due at the landing (d = 2)
    assert logic.tick(landed_ns + PERIOD_NS).positions[0] == 2.0


def test_continuer_continues_its_last_published_chunk_with_the_measured_delay():
    continuer = ChunkContinuer(RtcSettings("linear", 10.0, 8), DelayEstimate(window=5))
    first = continuer.continuation(STAMP_NS)
    assert first.leftover is None and first.delay_rows == 0  # the first chunk continues nothing
    published = chunk_result()
    continuer.published(published, STAMP_NS + 50_000_000)  # 50 ms from observation to publication
    following = continuer.continuation(STAMP_NS + 2 * PERIOD_NS)
    assert following.delay_rows == 3
    np.testing.assert_array_equal(following.leftover, published.actions[2:])
    assert following.settings == RtcSettings("linear", 10.0, 8)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    from embodied_ros.pipeline.stages import load_runtime
    from graph_bundles import pi05_bundle

    return load_runtime(pi05_bundle(tmp_path_factory))


def test_pi05_runtime_continues_a_physical_leftover(runtime):
    """Through the stage contract: the leftover (physical units) is taken to model space with the
    new observation's state, the frozen rows land near it, and no leftover is plain sampling."""
    from embodied_ros.pipeline.noise import stage_noise
    from embodied_ros.pipeline.types import ChunkContinuation, Observation

    rng = np.random.default_rng(7)
    height, width = runtime.spec.image_size
    images = {name: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for name in runtime.spec.camera_names}
    observation = Observation(STAMP_NS, images, rng.uniform(-1, 1, len(runtime.spec.state_names)).astype(np.float32),
                              "put the cup on the plate")
    prefix = runtime.build_prefix(runtime.encode(observation), observation)
    noise = stage_noise(1, "action", 0, runtime.spec.noise_shape)
    plain = runtime.act(prefix, None, noise)
    other = runtime.act(prefix, None, stage_noise(1, "action", 1, runtime.spec.noise_shape))
    settings = RtcSettings("linear", 10.0, 8)
    none_left = runtime.act(prefix, None, noise, ChunkContinuation(None, 2, settings))
    np.testing.assert_array_equal(none_left.actions, plain.actions)
    guided = runtime.act(prefix, None, noise, ChunkContinuation(other.actions[:8], 3, settings))
    frozen_error = np.abs(guided.actions[:3] - other.actions[:3]).max()
    assert frozen_error < 0.25 * np.abs(plain.actions[:3] - other.actions[:3]).max()
    with pytest.raises(ValueError, match="actions must be"):
        runtime.act(prefix, None, noise, ChunkContinuation(other.actions[:, :2], 3, settings))
