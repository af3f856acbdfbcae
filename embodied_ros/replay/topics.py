"""Which bag topic carries which input or output of the graph, and how users override it.

Defaults follow the graph's topic names: `/camera/<name>/image_raw`, `/joint_states`, `/instruction`,
`/embodied/action_chunk` and the two controller command topics. Overrides are `KEY=TOPIC` strings,
as given to `embodied-ros replay --topic-map`:

    camera:base=/my/cam          the image topic of camera `base`
    joint_states=/arm/joint_states
    instruction=/task
    trajectory=/arm_controller/joint_trajectory     recorded or produced JointTrajectory commands
    array=/forward_position_controller/commands     recorded or produced Float64MultiArray commands
    action_chunk=/policy/chunk
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

DEFAULT_JOINT_STATES = "/joint_states"
DEFAULT_INSTRUCTION = "/instruction"
DEFAULT_TRAJECTORY = "/joint_trajectory_controller/joint_trajectory"
DEFAULT_ARRAY = "/forward_position_controller/commands"
DEFAULT_ACTION_CHUNK = "/embodied/action_chunk"
DEFAULT_TIMING = "/embodied/timing"

_SCALAR_KEYS = ("joint_states", "instruction", "trajectory", "array", "action_chunk")


def camera_topic(camera: str) -> str:
    """The default image topic of a camera."""
    return f"/camera/{camera}/image_raw"


@dataclass(frozen=True)
class TopicMap:
    cameras: Mapping[str, str] = field(default_factory=dict)  # camera name -> image topic
    joint_states: str = DEFAULT_JOINT_STATES
    instruction: str = DEFAULT_INSTRUCTION
    trajectory: str = DEFAULT_TRAJECTORY
    array: str = DEFAULT_ARRAY
    action_chunk: str = DEFAULT_ACTION_CHUNK

    def __post_init__(self) -> None:
        roles: dict[str, str] = {}
        for key, topic in [*((f"camera:{c}", t) for c, t in self.cameras.items()),
                           *((k, getattr(self, k)) for k in _SCALAR_KEYS)]:
            if not topic.startswith("/"):
                raise ValueError(f"topic for {key!r} must be absolute (start with '/'), got {topic!r}")
            if topic in roles:
                raise ValueError(f"topic {topic} is mapped to both {roles[topic]} and {key}")
            roles[topic] = key

    @classmethod
    def for_cameras(cls, cameras: Iterable[str]) -> TopicMap:
        return cls(cameras={name: camera_topic(name) for name in cameras})

    def with_overrides(self, overrides: Iterable[str]) -> TopicMap:
        """Apply `KEY=TOPIC` strings (see the module docstring); unknown keys are an error."""
        cameras = dict(self.cameras)
        scalars: dict[str, str] = {}
        for item in overrides:
            key, sep, topic = item.partition("=")
            key, topic = key.strip(), topic.strip()
            if not sep or not key or not topic:
                raise ValueError(f"topic mapping {item!r} is not KEY=TOPIC (for example camera:base=/my/cam)")
            if key.startswith("camera:"):
                name = key[len("camera:"):]
                if not name:
                    raise ValueError(f"topic mapping {item!r} names no camera (use camera:<name>=TOPIC)")
                cameras[name] = topic
            elif key in _SCALAR_KEYS:
                scalars[key] = topic
            else:
                raise ValueError(
                    f"topic mapping {item!r}: unknown key {key!r}; "
                    f"use camera:<name> or one of {', '.join(_SCALAR_KEYS)}"
                )
        return replace(self, cameras=cameras, **scalars)

    def camera_of_topic(self) -> dict[str, str]:
        """Image topic -> camera name."""
        return {topic: name for name, topic in self.cameras.items()}
