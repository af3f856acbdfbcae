"""bring_up: every node configured, then what must come first (the composed graph: its controller's
process reporting active), then every configured node activated."""
from rclpy.lifecycle import TransitionCallbackReturn

from embodied_ros.nodes.run import bring_up


class _Node:
    def __init__(self, name: str, log: list, configures: bool = True):
        self.name, self.log, self.configures = name, log, configures

    def get_name(self) -> str:
        return self.name

    def trigger_configure(self):
        self.log.append(f"configure {self.name}")
        return TransitionCallbackReturn.SUCCESS if self.configures else TransitionCallbackReturn.FAILURE

    def trigger_activate(self):
        self.log.append(f"activate {self.name}")
        return TransitionCallbackReturn.SUCCESS


def test_every_node_is_configured_before_the_hook_and_activated_after_it():
    log = []
    nodes = [_Node("perception", log), _Node("action", log)]
    assert bring_up(nodes, lambda: log.append("controller active")) == []
    assert log == ["configure perception", "configure action", "controller active", "activate perception",
                   "activate action"]


def test_a_node_that_fails_to_configure_is_named_and_not_activated():
    log = []
    nodes = [_Node("perception", log, configures=False), _Node("action", log)]
    assert bring_up(nodes) == ["perception"]
    assert log == ["configure perception", "configure action", "activate action"]
