"""Replay with the default pi0.5 bundle (bundles/): the real runtime, through the real graph.

Lock-step chunks equal direct `pipeline.stages.infer` calls on the same observations and noise, and two
replays are identical; the command line runs end to end.
"""

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest

from embodied_ros.cli.main import main
from embodied_ros.node_infra.config import load_config
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.node_infra.paths import default_config
from embodied_ros.nodes.runtime_cache import acquire_runtime
from embodied_ros.pipeline.stages import infer
from embodied_ros.replay.bag_reader import read_episode
from embodied_ros.replay.runner import ReplayOptions, replay
from embodied_ros.replay.steps import StateSelector, observation_at, plan_steps
from embodied_ros.replay.synthetic import SyntheticConfig, write_episode
from embodied_ros.replay.topics import TopicMap

_domains = itertools.count(190)  # DDS domains of this file's graphs, apart from other tests' ranges
EVERY_STEP = {"schedule.perception": 1, "schedule.prefix": 1, "schedule.world": 1, "schedule.action": 1,
              "schedule.step_period_s": 0.1}


@pytest.fixture(autouse=True)
def _local_discovery(monkeypatch):
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


@pytest.fixture(scope="module")
def config():
    return load_config(default_config(), EVERY_STEP)


@pytest.fixture(scope="module")
def runtime(config):
    return acquire_runtime(config)


@pytest.fixture(scope="module")
def episode_bag(runtime, tmp_path_factory):
    spec = runtime.spec
    joints = tuple(spec.state_names) + tuple(n for n in spec.action_names if n not in spec.state_names)
    episode = SyntheticConfig(duration_s=0.8, cameras={"base_0_rgb": (48, 64), "wrist_0_rgb": (40, 40)},
                              joint_names=joints, command_joint_names=spec.action_names)
    episode = replace(episode, cameras={name: size for name, size in zip(spec.camera_names, episode.cameras.values())})
    return write_episode(tmp_path_factory.mktemp("bundle_episode") / "bag", episode, "sqlite3")


def test_lockstep_chunks_equal_direct_infer_with_the_default_bundle(config, runtime, episode_bag, tmp_path):
    result = replay(episode_bag, tmp_path / "out", config, ReplayOptions(progress=False), runtime=runtime,
                    domain_id=next(_domains))
    episode = read_episode(episode_bag, TopicMap.for_cameras(runtime.spec.camera_names))
    steps = plan_steps(episode, config.schedule.step_period_s)
    selector = StateSelector(episode, runtime.spec.state_names)
    start_ns, period_ns = int(config.schedule.lockstep_start_s * 1e9), int(config.schedule.step_period_s * 1e9)
    assert len(result.record.chunks) == len(steps) >= 7
    for k, (step, (_, chunk)) in enumerate(zip(steps, result.record.chunks)):
        observation = observation_at(episode, step, selector, start_ns + k * period_ns)
        direct = infer(runtime, observation, stage_noise(config.stages.seed_for(runtime.spec), "action", k, runtime.spec.noise_shape))
        np.testing.assert_allclose(chunk.actions, direct.actions, rtol=0, atol=1e-6)
        assert chunk.joint_names == runtime.spec.action_names
    metrics = json.loads(result.metrics_path.read_text())
    assert metrics["actions"]["available"] and len(metrics["actions"]["per_offset"]["mse"]) == runtime.spec.chunk_size
    print("\n".join(f"{stage}: p50 {d['p50']:.1f} ms, p99 {d['p99']:.1f} ms"
                    for stage, d in metrics["latency"]["stages_ms"].items()))


def test_two_replays_with_the_default_bundle_are_identical(config, runtime, episode_bag, tmp_path):
    options = ReplayOptions(progress=False, max_steps=4)
    first = replay(episode_bag, tmp_path / "a", load_config(default_config()), options, runtime=runtime,
                   domain_id=next(_domains))
    second = replay(episode_bag, tmp_path / "b", load_config(default_config()), options, runtime=runtime,
                    domain_id=next(_domains))
    assert len(first.record.chunks) == len(second.record.chunks) > 0
    for (_, a), (_, b) in zip(first.record.chunks, second.record.chunks):
        np.testing.assert_array_equal(a.actions, b.actions)
    assert [t for t, _ in first.record.commands] == [t for t, _ in second.record.commands]
    np.testing.assert_array_equal(np.stack([c for _, c in first.record.commands]),
                                  np.stack([c for _, c in second.record.commands]))


def test_replay_command_line_with_the_default_bundle(episode_bag, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["replay", str(episode_bag), "--out", str(out), "--max-steps", "3", "--no-progress",
                 "--domain-id", str(next(_domains))]) == 0
    printed = capsys.readouterr().out
    assert "3 steps" in printed and "report:" in printed
    assert {p.name for p in out.iterdir()} == {"bag", "metrics.json", "report.html"}
