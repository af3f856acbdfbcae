"""JointState selection, the instruction adapter, and the input buffer's freshness rules."""

import numpy as np
import pytest
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from embodied_ros.inputs import (
    InputBuffer, InputError, InstructionError, JointStateError, JointStateSelector, instruction_from_msg,
)
from embodied_ros.inputs.instruction import NewestPerPublisher
from embodied_ros.inputs.latest import InputSample


def _joint_state(names, positions):
    return JointState(name=list(names), position=[float(p) for p in positions])


def test_selects_and_orders_joints_by_name():
    selector = JointStateSelector(["elbow", "shoulder"])
    got = selector.select(_joint_state(["shoulder", "gripper", "elbow"], [1.0, 9.0, 2.0]))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [2.0, 1.0])
    # a different message layout after the first is re-indexed, not read with the stale index
    np.testing.assert_array_equal(selector.select(_joint_state(["elbow", "shoulder"], [5.0, 6.0])), [5.0, 6.0])


def test_missing_joint_is_named():
    selector = JointStateSelector(["shoulder", "wrist"])
    with pytest.raises(JointStateError, match=r"missing joint\(s\) \['wrist'\]"):
        selector.select(_joint_state(["shoulder"], [0.0]))


def test_nan_position_is_named_with_its_value():
    selector = JointStateSelector(["a", "b"])
    with pytest.raises(JointStateError, match="non-finite position: b=nan"):
        selector.select(_joint_state(["a", "b"], [0.0, float("nan")]))


def test_position_beyond_float32_is_refused_not_turned_into_inf():
    selector = JointStateSelector(["a", "b"])
    with pytest.raises(JointStateError, match="position out of range: a=1e"):
        selector.select(_joint_state(["a", "b"], [1e308, 0.0]))


def test_a_joint_named_twice_in_a_message_is_refused():
    selector = JointStateSelector(["a", "b"])
    with pytest.raises(JointStateError, match=r"joint\(s\) \['a'\] named more than once"):
        selector.select(_joint_state(["a", "b", "a"], [1.0, 2.0, 99.0]))
    np.testing.assert_array_equal(selector.select(_joint_state(["a", "b", "c", "c"], [1.0, 2.0, 3.0, 4.0])),
                                  [1.0, 2.0])  # a repeated joint the model does not use is left alone


def test_names_and_positions_of_different_length_are_rejected():
    msg = JointState(name=["a", "b"], position=[0.0])
    with pytest.raises(JointStateError, match="2 joint names but 1 positions"):
        JointStateSelector(["a"]).select(msg)


def test_selector_rejects_duplicate_names():
    with pytest.raises(ValueError, match="repeated"):
        JointStateSelector(["a", "a"])


def test_instruction_is_stripped_and_empty_is_an_error():
    assert instruction_from_msg(String(data="  pick up the cube \n")) == "pick up the cube"
    with pytest.raises(InstructionError, match="empty"):
        instruction_from_msg(String(data="   "))


def test_buffer_refuses_missing_bad_and_old_inputs():
    buffer = InputBuffer(["front", "joint_states"])
    with pytest.raises(InputError, match="front: no message received yet"):
        buffer.newest_usable(["front"], now_ns=10, max_age_ns=5, max_future_ns=0)
    buffer.put("front", InputSample(stamp_ns=100, value="image"))
    buffer.put("joint_states", InputSample(stamp_ns=100, error=JointStateError("joint_states: bad")))
    with pytest.raises(JointStateError, match="bad"):
        buffer.newest_usable(["front", "joint_states"], now_ns=101, max_age_ns=50, max_future_ns=0)
    buffer.put("joint_states", InputSample(stamp_ns=120, value="state"))
    chosen = buffer.newest_usable(["front", "joint_states"], now_ns=140, max_age_ns=50, max_future_ns=0)
    assert chosen["front"].value == "image" and chosen["joint_states"].value == "state"
    with pytest.raises(InputError, match=r"front: newest message is 60 ms old \(limit 50 ms\)"):
        buffer.newest_usable(["front"], now_ns=100 + 60_000_000, max_age_ns=50_000_000, max_future_ns=0)


def test_buffer_refuses_inputs_stamped_in_the_future():
    buffer = InputBuffer(["front"])
    buffer.put("front", InputSample(stamp_ns=1_000_000_000 + 80_000_000, value="image"))  # 80 ms ahead
    assert buffer.newest_usable(["front"], now_ns=1_000_000_000, max_age_ns=500_000_000,
                                max_future_ns=100_000_000)["front"].value == "image"
    buffer.put("front", InputSample(stamp_ns=1_000_000_000 + 3_600_000_000_000, value="image"))  # an hour ahead
    with pytest.raises(InputError, match=r"front: newest message is stamped 3600000 ms in the future \(limit 100 ms\)"):
        buffer.newest_usable(["front"], now_ns=1_000_000_000, max_age_ns=500_000_000, max_future_ns=100_000_000)


def test_buffer_finds_samples_stamped_at_a_step():
    buffer = InputBuffer(["front"], keep=3)
    for stamp in (10, 20, 30):
        buffer.put("front", InputSample(stamp_ns=stamp, value=stamp))
    assert buffer.stamped_at(["front"], 20)["front"].value == 20
    assert buffer.stamped_at(["front"], 40) is None
    buffer.put("front", InputSample(stamp_ns=40, error=InputError("front: broken")))
    with pytest.raises(InputError, match="broken"):
        buffer.stamped_at(["front"], 40)


def test_buffer_joins_a_silence_note_to_missing_and_old_inputs_until_the_next_message():
    buffer = InputBuffer(["front"])
    buffer.note_silence("front", "publisher /cam offers reliability best_effort")
    with pytest.raises(InputError, match=r"^front: no message received yet \(publisher /cam offers reliability"):
        buffer.newest_usable(["front"], now_ns=10, max_age_ns=5, max_future_ns=0)
    buffer.put("front", InputSample(stamp_ns=100, value="image"))
    with pytest.raises(InputError, match=r"^front: newest message is \d+ ms old \(limit 0 ms\)$"):
        buffer.newest_usable(["front"], now_ns=100 + 60_000_000, max_age_ns=50, max_future_ns=0)
    buffer.note_silence("front", "a publisher on /front offers an incompatible deadline")
    with pytest.raises(InputError, match=r"ms\) \(a publisher on /front offers an incompatible deadline\)$"):
        buffer.newest_usable(["front"], now_ns=100 + 60_000_000, max_age_ns=50, max_future_ns=0)


def test_each_instruction_message_is_taken_once_and_never_an_older_one_after_it():
    taken = NewestPerPublisher()
    latched, other = b"\x01" * 16, b"\x02" * 16
    assert taken.is_new(latched, 1) and not taken.is_new(latched, 1)  # the same message by its second way
    assert taken.is_new(latched, 3) and not taken.is_new(latched, 2)  # replayed history after a newer message
    assert taken.is_new(other, 1)  # sequence numbers count per publisher
    assert taken.is_new(latched, None) and taken.is_new(latched, None)  # unnumbered: every message
