"""Acceptance on real rclpy with the real pi0.5 runtime: inputs published on the graph's topics
give the action chunk of a direct runtime call on the same inputs and noise, composed and with
one process per node."""

import numpy as np
import pytest

from embodied_ros.node_infra.config import load_config
from embodied_ros.graph.lockstep import LockstepGraph
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import infer, load_runtime
from embodied_ros.pipeline.types import Observation
from domains import next_domain
from graph_bundles import pi05_bundle

INSTRUCTION = "put the cup on the plate"
SEED = 5


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return pi05_bundle(tmp_path_factory)


@pytest.fixture(scope="module")
def runtime(bundle):
    return load_runtime(bundle)


@pytest.fixture(scope="module")
def inputs(runtime):
    rng = np.random.default_rng(42)
    height, width = runtime.spec.image_size
    images = {name: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for name in runtime.spec.camera_names}
    state = rng.uniform(-1.0, 1.0, len(runtime.spec.state_names)).astype(np.float32)
    return images, state


def _direct_chunk(runtime, inputs, stamp_ns):
    images, state = inputs
    observation = Observation(stamp_ns, images, state, INSTRUCTION)
    return infer(runtime, observation, stage_noise(SEED, "action", 0, runtime.spec.noise_shape))


def _check(output, runtime, inputs):
    expected = _direct_chunk(runtime, inputs, output.stamp_ns)
    assert output.chunk is not None, f"no chunk; input problem: {output.input_problem!r}"
    assert output.chunk.joint_names == runtime.spec.action_names
    np.testing.assert_allclose(output.chunk.actions, expected.actions, atol=1e-5, rtol=0)
    assert len(output.commands) == 5  # 0.1 s step at 50 Hz


def test_composed_graph_gives_the_direct_runtime_chunk(bundle, runtime, inputs):
    config = load_config(None, {"bundle": str(bundle), "stages.noise_seed": SEED})
    with LockstepGraph(config, domain_id=next_domain(), timeout_s=120) as graph:
        output = graph.step(*inputs, instruction=INSTRUCTION)
    _check(output, runtime, inputs)


def test_one_process_per_node_gives_the_direct_runtime_chunk(bundle, runtime, inputs, tmp_path):
    config = load_config(None, {"bundle": str(bundle), "stages.noise_seed": SEED, "layout": "separate"})
    graph = LockstepGraph(config, runtime=runtime, domain_id=next_domain(), timeout_s=120, log_dir=str(tmp_path))
    try:
        graph.start()
        processes = graph.graph
        output = graph.step(*inputs, instruction=INSTRUCTION)
    except TimeoutError:
        print({path.name: path.read_text()[-2000:] for path in tmp_path.glob("*.log")})
        raise
    finally:
        graph.close()
    _check(output, runtime, inputs)
    assert processes.exited() == {name: 0 for name in processes.node_names}  # clean exits on SIGINT
