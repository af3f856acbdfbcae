"""Topic names (relative, so a namespace applies; remap any of them) and the QoS of each link."""

from __future__ import annotations

from enum import Enum

from rclpy.duration import Duration, Infinite
from rclpy.qos import (
    DurabilityPolicy, HistoryPolicy, QoSPolicyKind, QoSProfile, ReliabilityPolicy, qos_policy_name_from_kind,
)

JOINT_STATES = "joint_states"
INSTRUCTION = "instruction"
OBSERVATION = "embodied/observation"
INPUT_STATUS = "embodied/input_status"
ACTION_CHUNK = "embodied/action_chunk"
COMMANDED = "embodied/commanded"  # every command as a JointState: named and stamped with its tick
TIMING = "embodied/timing"
DIAGNOSTICS = "/diagnostics"
CLOCK = "/clock"
COMMAND_TOPICS = {
    "joint_trajectory": "joint_trajectory_controller/joint_trajectory",
    "float64_multi_array": "forward_position_controller/commands",
}
COMMAND_PREVIEW = "embodied/command_preview"  # the commands of a dry run, in place of the command topic


def command_topic(output: str, dry_run: bool) -> str:
    """Where the controller publishes its commands: the output's topic, or the preview topic in a dry run."""
    return COMMAND_PREVIEW if dry_run else COMMAND_TOPICS[output]


def camera_topic(camera: str, image_transport: str = "raw") -> str:
    """A camera's image topic; image_transport's compressed transport publishes on `<topic>/compressed`."""
    base = f"camera/{camera}/image_raw"
    return base if image_transport == "raw" else f"{base}/{image_transport}"


def stage_topic(stage: str) -> str:
    return f"embodied/{stage}"


def world_frames_topic(camera: str) -> str:
    """The world predictor's decoded frames of one camera (stages.world_frames_every)."""
    return f"embodied/world_frames/{camera}"


def _profile(depth: int, reliable: bool = True, latched: bool = False) -> QoSProfile:
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=depth,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
    )


def sensor_qos(reliability: str, lockstep: bool) -> QoSProfile:
    """Cameras and joint states: newest only. Lock-step keeps every step's input (see lockstep_qos)."""
    if lockstep:
        return lockstep_qos()
    return _profile(depth=1, reliable=reliability == "reliable")


def stage_qos(lockstep: bool) -> QoSProfile:
    """Between stages: keep-latest (depth 1) when free-running."""
    return lockstep_qos() if lockstep else _profile(depth=1)


def lockstep_qos(depth: int = 20) -> QoSProfile:
    """Lock-step links: reliable and transient-local, so nothing published before discovery completes
    (separate processes) is lost; a lock-step graph waits for every output and must never miss one."""
    return _profile(depth=depth, latched=True)


def command_qos(lockstep: bool) -> QoSProfile:
    return lockstep_qos() if lockstep else _profile(depth=10)


def status_qos(lockstep: bool) -> QoSProfile:
    return lockstep_qos() if lockstep else _profile(depth=10)


def timing_qos(lockstep: bool) -> QoSProfile:
    return lockstep_qos(depth=100) if lockstep else _profile(depth=100)


# The instruction is taken from volatile and latched publishers alike (INSTRUCTION_ANY_QOS); once a latched
# one is seen, a second subscription with INSTRUCTION_QOS also receives what it published before the graph
# came up. The graph's own instruction publishers are latched: late joiners still get the current task.
INSTRUCTION_QOS = _profile(depth=1, latched=True)
INSTRUCTION_ANY_QOS = _profile(depth=1)
DIAGNOSTICS_QOS = _profile(depth=10)
CLOCK_QOS = lockstep_qos(depth=100)


def qos_mismatch(topic: str, policy: QoSPolicyKind, requested: QoSProfile, offered: QoSProfile | None = None,
                 publisher: str = "") -> str:
    """Why a publisher on `topic` cannot reach a subscription: the policy, what it offers, what is requested."""
    name = qos_policy_name_from_kind(policy).lower()
    who = f"publisher {publisher}" if publisher else "a publisher"
    offered_value = f"{name} {_policy_value(offered, name)}" if offered is not None else f"an incompatible {name}"
    return f"{who} on {topic} offers {offered_value}; the subscription requests {_policy_value(requested, name)}"


def _policy_value(profile: QoSProfile, policy_name: str) -> str:
    value = getattr(profile, policy_name, None)
    if isinstance(value, Enum):
        return value.name.lower()
    if isinstance(value, Duration):
        if value == Infinite or value.nanoseconds == 0:  # 0: unset, the middleware's default (infinite)
            return "infinite"
        return f"{value.nanoseconds / 1e9:g} s"
    return "?" if value is None else str(value)
