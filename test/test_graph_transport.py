"""Stage outputs by reference and serialized: same content either way, skips marked, errors clear."""

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message

from embodied_ros.node_infra.transport import (
    ResultStore, chunk_to_msg, decode_output, encode_output, msg_to_chunk, tensor_to_array, array_to_tensor,
)
from embodied_ros.msg import ActionChunk, StageOutput, Tensor
from embodied_ros.node_infra.config import TransportConfig
from embodied_ros.pipeline.types import ActionChunkResult, Observation, StageResult


def _wire(msg, cls):
    return deserialize_message(serialize_message(msg), cls)


def test_serialized_stage_result_survives_the_wire_with_meta():
    rng = np.random.default_rng(0)
    result = StageResult(stage="prefix", stamp_ns=123, tensors={
        "keys": rng.standard_normal((2, 1, 5, 4)).astype(np.float32),
        "valid": np.array([True, False, True]),
        "positions": np.arange(5, dtype=np.int64),
    }, meta={"n_valid": 4, "scale": 0.5, "note": "ok"})
    msg = _wire(encode_output("prefix", 7, 3, result, now_ns=200, store=None), StageOutput)
    assert msg.handle == "" and msg.sequence == 7 and msg.step == 3
    back = decode_output(msg, ResultStore())
    assert back.stage == "prefix" and back.stamp_ns == 123 and back.meta == result.meta
    for name, value in result.tensors.items():
        assert back.tensors[name].dtype == value.dtype
        np.testing.assert_array_equal(back.tensors[name], value)


def test_observation_round_trip_keeps_images_state_and_instruction():
    obs = Observation(stamp_ns=5, images={"front": np.full((2, 3, 3), 7, np.uint8)},
                      state=np.array([0.5, -1.0], np.float32), instruction="stack the cups")
    back = decode_output(_wire(encode_output("observation", 1, 0, obs, 9, None), StageOutput), ResultStore())
    assert isinstance(back, Observation) and back.instruction == "stack the cups" and back.stamp_ns == 5
    np.testing.assert_array_equal(back.images["front"], obs.images["front"])
    np.testing.assert_array_equal(back.state, obs.state)


def test_by_reference_hands_over_the_same_object_and_old_ones_expire():
    store = ResultStore(keep_last=2)
    results = [StageResult(stage="perception", stamp_ns=i, tensors={}) for i in range(3)]
    messages = [encode_output("perception", i + 1, i, r, 0, store) for i, r in enumerate(results)]
    assert not messages[2].tensors and messages[2].handle
    assert decode_output(messages[2], store) is results[2]
    with pytest.raises(LookupError, match="raise transport.keep_last"):
        decode_output(messages[0], store)
    with pytest.raises(LookupError, match="another process; use transport.mode: serialized"):
        decode_output(messages[2], ResultStore())


def test_handles_stay_unique_when_a_restarted_stage_counts_from_one_again():
    store = ResultStore(keep_last=2)
    first = StageResult(stage="prefix", stamp_ns=1, tensors={})
    again = StageResult(stage="prefix", stamp_ns=2, tensors={})
    old = encode_output("prefix", 1, 0, first, 0, store)
    new = encode_output("prefix", 1, 0, again, 0, store)
    assert decode_output(old, store) is first and decode_output(new, store) is again


def test_skip_marker_decodes_to_none():
    marker = encode_output("world", 5, 4, None, now_ns=1, store=None)
    assert marker.sequence == 0
    assert decode_output(_wire(marker, StageOutput), ResultStore()) is None
    assert msg_to_chunk(_wire(chunk_to_msg(None, 1), ActionChunk)) is None


def test_action_chunk_round_trip():
    chunk = ActionChunkResult(stamp_ns=1_500_000_000, actions=np.arange(6, dtype=np.float32).reshape(3, 2),
                              action_period_s=0.02, joint_names=("a", "b"))
    back = msg_to_chunk(_wire(chunk_to_msg(chunk, 2_000_000_000), ActionChunk))
    np.testing.assert_array_equal(back.actions, chunk.actions)
    assert back.stamp_ns == chunk.stamp_ns and back.joint_names == ("a", "b")
    assert back.action_period_s == pytest.approx(0.02)


def test_inconsistent_messages_are_clear_errors():
    msg = chunk_to_msg(ActionChunkResult(0, np.zeros((2, 2), np.float32), 0.02, ("a", "b")), 0)
    msg.horizon = 3
    with pytest.raises(ValueError, match="says 3x2 but has 4 values"):
        msg_to_chunk(msg)
    tensor = array_to_tensor("x", np.zeros(4, np.float32))
    tensor.shape = [5]
    with pytest.raises(ValueError, match=r"tensor 'x': shape \[5\] float32 needs 20 bytes, message has 16"):
        tensor_to_array(tensor)


@pytest.mark.parametrize("wire_dtype, relative_error", [("float16", 2.0 ** -11), ("bfloat16", 2.0 ** -8)])
def test_stage_arrays_travel_at_the_wire_precision_and_come_back_float32(wire_dtype, relative_error):
    rng = np.random.default_rng(1)
    keys = rng.standard_normal((3, 7, 2, 8)).astype(np.float32) * 40
    result = StageResult(stage="prefix", stamp_ns=1, tensors={"keys": keys, "valid": np.ones(7, bool),
                                                              "positions": np.arange(7, dtype=np.int64)},
                         meta={"n_valid": 7, "scale": np.float32(0.1)})
    msg = _wire(encode_output("prefix", 1, 0, result, 0, None, TransportConfig(wire_dtype=wire_dtype)), StageOutput)
    sent = {t.name: t for t in msg.tensors}
    assert sent["keys"].dtype == wire_dtype and len(sent["keys"].data) == keys.size * 2  # half the bytes
    assert sent["positions"].dtype == "int64" and sent["meta/scale"].dtype == "float32"  # exact
    back = decode_output(msg, ResultStore())
    assert back.tensors["keys"].dtype == np.float32 and back.tensors["keys"].shape == keys.shape
    np.testing.assert_allclose(back.tensors["keys"], keys, rtol=relative_error, atol=0)
    assert not np.array_equal(back.tensors["keys"], keys)  # it did travel narrowed
    np.testing.assert_array_equal(back.tensors["positions"], result.tensors["positions"])
    assert back.meta["scale"] == np.float32(0.1)


def test_observations_travel_exact_whatever_the_wire_precision():
    obs = Observation(stamp_ns=5, images={"front": np.full((2, 3, 3), 7, np.uint8)},
                      state=np.array([0.1, -1.3], np.float32), instruction="stack the cups")
    msg = encode_output("observation", 1, 0, obs, 9, None, TransportConfig(wire_dtype="bfloat16"))
    assert {t.name: t.dtype for t in msg.tensors} == {"image/front": "uint8", "state": "float32",
                                                      "instruction": "utf8"}


def _camera_frame(height=96, width=128) -> np.ndarray:
    """A smooth picture with an edge, as cameras see (noise would not compress)."""
    y, x = np.mgrid[0:height, 0:width]
    frame = np.stack([x * 255 // width, y * 255 // height, ((x // 16 + y // 16) % 2) * 200], axis=-1)
    return frame.astype(np.uint8)


@pytest.mark.parametrize("codec", ["png", "jpeg"])
def test_observation_images_travel_compressed_in_the_wire_codec(codec):
    frame = _camera_frame()
    obs = Observation(stamp_ns=5, images={"front": frame, "wrist": frame[:48, :64].copy()},
                      state=np.array([0.1, -1.3], np.float32), instruction="stack the cups")
    msg = _wire(encode_output("observation", 1, 0, obs, 9, None, TransportConfig(image_codec=codec)), StageOutput)
    sent = {t.name: t for t in msg.tensors}
    assert sent["image/front"].dtype == codec and list(sent["image/front"].shape) == [96, 128, 3]
    assert len(sent["image/front"].data) < frame.nbytes / 3 and sent["state"].dtype == "float32"
    back = decode_output(msg, ResultStore())
    for name, image in obs.images.items():
        assert back.images[name].shape == image.shape and back.images[name].dtype == np.uint8
        error = np.abs(back.images[name].astype(int) - image).mean()
        assert error == 0 if codec == "png" else 0 < error < 8, (name, error)  # JPEG: lossy, close
    np.testing.assert_array_equal(back.state, obs.state)


def test_a_broken_or_misdescribed_compressed_image_tensor_is_a_value_error():
    from embodied_ros.node_infra.transport import image_to_tensor

    good = image_to_tensor("image/front", _camera_frame(), "jpeg")
    truncated = Tensor(name="image/front", dtype="jpeg", shape=[96, 128, 3])
    truncated.data = good.data[: len(good.data) // 2]
    mislabelled = Tensor(name="image/front", dtype="png", shape=[96, 128, 3])
    mislabelled.data = good.data
    wrong_shape = Tensor(name="image/front", dtype="jpeg", shape=[64, 128, 3])
    wrong_shape.data = good.data
    for tensor, says in ((truncated, "cannot decode"), (mislabelled, "the data is JPEG"), (wrong_shape, "shape")):
        with pytest.raises(ValueError, match=says):
            tensor_to_array(tensor)
    with pytest.raises(ValueError, match="image_codec"):
        TransportConfig(image_codec="webp")


def test_bfloat16_rounds_to_nearest_even_and_keeps_specials():
    from embodied_ros.node_infra.transport import narrow_float32, widen_bfloat16

    values = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -2.5, np.inf, -np.inf, np.nan, 0.0, 3e38],
                      np.float32)
    back = widen_bfloat16(narrow_float32(values, "bfloat16"))
    # ties go to the even neighbour: 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6
    np.testing.assert_array_equal(back[:6], [1.0, 1.0, 1.0 + 2.0 ** -6, -2.5, np.inf, -np.inf])
    assert np.isnan(back[6]) and back[7] == 0.0 and np.isfinite(back[8])


def test_float16_saturates_values_beyond_its_range_instead_of_making_them_infinite():
    from embodied_ros.node_infra.transport import narrow_float32

    narrowed = narrow_float32(np.array([1e6, -1e6, np.inf, 1.5], np.float32), "float16")
    np.testing.assert_array_equal(narrowed, [65504.0, -65504.0, np.inf, 1.5])
    with pytest.raises(ValueError, match="wire dtype must be one of"):
        narrow_float32(np.zeros(2, np.float32), "int8")
