"""The graph configuration as ROS parameters of a node: declared with their documentation, read back."""

from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter

from embodied_ros.node_infra.config import GraphConfig, from_flat, parameter_fields, to_parameters
from embodied_ros.node_infra.drive import drive_for

_EMPTY_LIST_TYPES = {
    "tuple[str, ...]": Parameter.Type.STRING_ARRAY,
    "tuple[float, ...]": Parameter.Type.DOUBLE_ARRAY,
}


def declare_config(node: Node) -> None:
    """Declare every config setting (defaults from GraphConfig) plus `autostart`."""
    defaults = to_parameters(GraphConfig())
    for name, spec in parameter_fields():
        descriptor = ParameterDescriptor(description=spec.metadata.get("doc", ""))
        default: Any = defaults[name]
        if isinstance(default, list) and not default:
            default = _EMPTY_LIST_TYPES[spec.type]  # typed but unset: an empty list has no ROS type
        node.declare_parameter(name, default, descriptor)
    node.declare_parameter("autostart", False, ParameterDescriptor(
        description="configure and activate on start-up (without a lifecycle manager)"))


def read_config(node: Node) -> GraphConfig:
    """GraphConfig from the node's parameters; ValueError naming the parameter if one is invalid."""
    flat = {}
    for name, _ in parameter_fields():
        try:
            flat[name] = node.get_parameter(name).value
        except ParameterUninitializedException:
            continue  # a list setting left empty
    return from_flat(flat)


def node_parameters(config: GraphConfig) -> dict[str, Any]:
    """Parameters to give every node of a graph (what launch files and `up` pass)."""
    parameters = to_parameters(config)
    parameters = {name: value for name, value in parameters.items() if value != []}
    if drive_for(config.schedule).uses_sim_time:
        parameters["use_sim_time"] = True
    return parameters
