"""Stage outputs by reference and serialized: same content either way, skips marked, errors clear."""

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message

from embodied_ros.node_infra.transport import (
    ResultStore, chunk_to_msg, decode_output, encode_output, msg_to_chunk, tensor_to_array, array_to_tensor,
)
from embodied_ros.msg import ActionChunk, StageOutput
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
