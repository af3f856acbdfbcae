"""LingBot-VA's graph stages against its step loop (no ROS): with one action row per step and the
world predictor run whenever the rows of the last chunk are used up, the stages and the world
episode give lerobot's `select_action` actions exactly, so the graph's schedule is the only thing
that makes its chunks differ from the step loop's; and bad inputs are refused in one line."""

import numpy as np
import pytest

from embodied_ros.bundle import open_bundle
from embodied_ros.models.lingbot_va import lerobot_bundle as lb
from embodied_ros.models.lingbot_va.closed_loop import seeded_noise
from embodied_ros.models.lingbot_va.runtime import load_runtime
from embodied_ros.pipeline.types import Observation
from graph_bundles import world_action_bundle

TASK = "put the black bowl on the plate"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return open_bundle(world_action_bundle(tmp_path_factory))


def test_stages_and_world_episode_equal_the_step_loop(bundle):
    config = bundle.config[lb.SECTION]
    frames_per_chunk, per_frame = config["frame_chunk_size"], config["action_per_frame"]
    steps = (3 * frames_per_chunk - 1) * per_frame  # three chunks, the first without its frame 0
    frames = lb._reference_frames(config, steps)
    noise = seeded_noise(7)
    policy = lb.load_policy(bundle, "numpy", noise)
    runtime = load_runtime(bundle, "numpy")
    episode = runtime.world_episode()
    period_ns = round(runtime.spec.action_period_s * 1e9)
    expected, rows, chunks = [], [], []
    for t in range(steps):
        images = {key: frames[key][t] for key in config["obs_cam_keys"]}
        expected.append(policy.unnormalize(policy.select_action(images, TASK)))
        observation = Observation(t * period_ns, {key.rsplit(".", 1)[-1]: image for key, image in images.items()},
                                  None, TASK)
        prefix = runtime.build_prefix(runtime.encode(observation), observation)
        runtime.observe_world(episode, prefix)
        if not rows:
            index = len(chunks)
            video, action = noise(index, (48, frames_per_chunk, *episode.latent_hw),
                                  (config["action_dim"], frames_per_chunk, per_frame))
            world = runtime.predict_world(prefix, np.concatenate([video.ravel(), action.ravel()]), episode)
            chunk = runtime.act(prefix, world)
            assert chunk.stamp_ns == observation.stamp_ns and world.meta["chunk"] == index
            chunks.append(chunk)
            rows = list(chunk.actions)
        np.testing.assert_array_equal(rows.pop(0), expected[-1], err_msg=f"step {t}")
    assert len(chunks) == 3


def test_bad_inputs_are_refused_in_one_line(bundle):
    runtime = load_runtime(bundle, "numpy")
    height, width = runtime.spec.image_size
    images = {name: np.zeros((height, width, 3), np.uint8) for name in runtime.spec.camera_names}
    missing = Observation(0, {runtime.spec.camera_names[0]: images[runtime.spec.camera_names[0]]}, None, TASK)
    with pytest.raises(ValueError, match="camera"):
        runtime.encode(missing)
    observation = Observation(0, images, None, TASK)
    prefix = runtime.build_prefix(runtime.encode(observation), observation)
    with pytest.raises(ValueError, match="episode"):
        runtime.predict_world(prefix, np.zeros(runtime.spec.world_noise_shape, np.float32))
    with pytest.raises(ValueError, match="noise"):
        runtime.predict_world(prefix, np.zeros(3, np.float32), runtime.world_episode())
    with pytest.raises(ValueError, match="world prediction"):
        runtime.act(prefix, None)
