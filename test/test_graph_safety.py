"""The controller node with hostile chunks, in a lock-step graph on real rclpy: a chunk that breaks a
position or velocity limit, jumps away from the joint state or carries NaN is refused, the arm holds where it
is and /diagnostics says why; a dry run publishes on the preview topic only."""

import re
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from embodied_ros.node_infra.config import load_config
from embodied_ros.graph.lockstep import LockstepGraph
from embodied_ros.node_infra.topics import COMMAND_PREVIEW, COMMAND_TOPICS, DIAGNOSTICS, lockstep_qos
from domains import next_domain
from fake_runtime import FakeRuntime, random_images

JOINTS = ["j0", "j1", "j2"]


class NanRuntime(FakeRuntime):
    def act(self, prefix, world, noise=None):
        chunk = super().act(prefix, world, noise)
        chunk.actions[3, 1] = np.nan
        return chunk


def _episode(runtime, steps):
    rng = np.random.default_rng(7)
    return [(random_images(runtime, rng), np.full(3, 0.5)) for _ in range(steps)]


def _run_and_listen(config, runtime, steps, topics=(), heard_enough=None):
    """Run `steps` lock-step steps; the controller's diagnostics messages and what came on `topics`
    (spun until the controller reported a refused chunk or `heard_enough(heard, messages)`, at most 5 s)."""
    heard = {topic: [] for topic in topics}
    messages = []
    with LockstepGraph(config, runtime=runtime, domain_id=next_domain(), timeout_s=30) as graph:
        driver = graph.driver
        driver.create_subscription(DiagnosticArray, DIAGNOSTICS, lambda msg: messages.extend(
            s.message for s in msg.status if s.name.endswith(": controller")), 50)
        for topic, message_type in topics:
            driver.create_subscription(message_type, topic, heard[(topic, message_type)].append, lockstep_qos())
        outputs = graph.run(_episode(runtime, steps), "stack the cups")
        deadline = time.monotonic() + 5
        done = heard_enough or (lambda _, said: any(m.startswith("holding: action chunk") for m in said))
        while time.monotonic() < deadline and not done(heard, messages):
            graph.executor.spin_once(timeout_sec=0.05)
    return outputs, messages, heard


def _held(config, runtime):
    outputs, messages, _ = _run_and_listen(config, runtime, 2)
    commands = np.stack([c.positions for o in outputs for c in o.commands])
    assert outputs[0].chunk is not None  # the action head did send its chunk ...
    np.testing.assert_array_equal(commands, np.full((10, 3), 0.5))  # ... and the arm held at the joint state
    return [m for m in messages if m.startswith("holding: action chunk")]


def test_a_chunk_beyond_the_position_limits_is_refused_and_the_arm_holds():
    config = load_config(None, {"controller.joints": JOINTS, "controller.position_upper": [0.1] * 3})
    reasons = _held(config, FakeRuntime())
    assert reasons and "leaves the position limits: j0 at " in reasons[0] and "(position_upper 0.1)" in reasons[0]


def test_a_chunk_that_jumps_away_from_the_joint_state_is_refused_and_the_arm_holds():
    config = load_config(None, {"controller.joints": JOINTS, "controller.max_jump": [0.01] * 3})
    reasons = _held(config, FakeRuntime())
    assert reasons and re.fullmatch(r"holding: action chunk starts 0\.\d+ away from the joint state on j\d "
                                    r"\(max_jump 0\.01\)", reasons[0])


def test_a_chunk_faster_than_the_velocity_limits_is_refused_and_the_arm_holds():
    config = load_config(None, {"controller.joints": JOINTS, "controller.max_velocity": [0.5] * 3})
    reasons = _held(config, FakeRuntime())  # its rows differ by noise: about 1 unit/s row to row
    assert reasons and re.fullmatch(r"holding: action chunk moves j\d at \d\.\d+/s between rows \d and \d "
                                    r"\(max_velocity 0\.5\)", reasons[0])


def test_a_chunk_with_nan_is_refused_and_the_arm_holds():
    reasons = _held(load_config(None, {}), NanRuntime())
    assert reasons and reasons[0] == "holding: action chunk has non-finite values (row 3, j1 = nan)"


def test_dry_run_publishes_commands_on_the_preview_topic_only():
    config = load_config(None, {"controller.dry_run": True, "controller.output": "float64_multi_array"})
    listened = ((COMMAND_PREVIEW, Float64MultiArray), (COMMAND_TOPICS["float64_multi_array"], Float64MultiArray),
                (COMMAND_TOPICS["joint_trajectory"], JointTrajectory))
    outputs, messages, heard = _run_and_listen(
        config, FakeRuntime(), 2, listened,
        lambda heard, said: len(heard[listened[0]]) >= 10 and any(m.startswith("streaming") for m in said))
    commands = [c.positions for o in outputs for c in o.commands]
    assert len(commands) == 10 and "streaming (dry run: on the preview topic only)" in messages
    preview = heard[listened[0]]
    assert len(preview) == 10 and np.allclose(preview[-1].data, commands[-1])
    assert heard[listened[1]] == [] and heard[listened[2]] == []


def test_the_first_commands_ramp_from_the_joint_state_unless_the_ramp_is_off():
    runtime = FakeRuntime()
    ramped, _, _ = _run_and_listen(load_config(None, {}), runtime, 2, heard_enough=lambda *_: True)
    direct, _, _ = _run_and_listen(load_config(None, {"controller.ramp_s": 0.0}), runtime, 2,
                                   heard_enough=lambda *_: True)
    first_chunk = ramped[0].chunk.actions.astype(np.float64)
    ramp = np.stack([c.positions for o in ramped for c in o.commands])  # 10 ticks: 0.2 s of the 1 s ramp
    np.testing.assert_array_equal(ramp[0], np.full(3, 0.5))  # starts at the joint state ...
    assert np.all(np.abs(ramp - 0.5) <= 0.2 * np.abs(first_chunk).max() + 0.5 * 0.2)  # ... and leaves it slowly
    np.testing.assert_allclose(direct[0].commands[0].positions, first_chunk[0])  # no ramp: the chunk at once


class FallbackRuntime(FakeRuntime):
    """A head that could not make a proper chunk and hands back its stand-in (pi0-FAST's undecodable tokens)."""

    def act(self, prefix, world, noise=None):
        chunk = super().act(prefix, world, noise)
        chunk.fallback, chunk.problem = True, "the action tokens do not decode"
        return chunk


def test_a_heads_fallback_chunk_is_never_sent_and_the_arm_holds():
    outputs, messages, _ = _run_and_listen(load_config(None, {}), FallbackRuntime(), 2,
                                           heard_enough=lambda _, said: bool(said))
    assert all(o.chunk is None for o in outputs)  # nothing reached the controller ...
    commands = np.stack([c.positions for o in outputs for c in o.commands]) if any(o.commands for o in outputs) \
        else np.full((1, 3), 0.5)
    np.testing.assert_array_equal(commands, np.full_like(commands, 0.5))  # ... and the arm stayed where it was
