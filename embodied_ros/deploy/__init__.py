"""Layer 5, deployment adapters: action chunks -> joint commands at the actuator rate."""

from embodied_ros.deploy.chunk import TimedChunk
from embodied_ros.deploy.command import Command, CommandLogic
from embodied_ros.deploy.limits import JointLimits
from embodied_ros.deploy.mapping import ActionMapping

__all__ = ["ActionMapping", "Command", "CommandLogic", "JointLimits", "TimedChunk"]
