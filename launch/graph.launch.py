"""Start the embodied_ros graph for any model bundle.

    ros2 launch embodied_ros graph.launch.py [config:=smolvla|my.yaml] [bundle:=/path/model.gguf]
        [layout:=composed|separate] [robot:=none|synthetic] [namespace:=arm]
        [remaps:=joint_states:=/arm/joint_states,instruction:=/task] [host:=all|robot|inference]
        [respawn:=false|true]

config:= takes a config file or the name of a shipped one (pi05, pi0, smolvla, groot, lingbot_va,
... from config/; default pi05); bundle:= replaces the config's bundle.

Composed: one `embodied-ros-container` process hosting every node (stage outputs by reference).
Separate: one lifecycle node per process, configured then activated by launch (stage outputs as
Tensor messages; see docs/graph.md for the Fast DDS shared-memory settings). A graph process that
exits with an error (a missing bundle) ends the launch with exit status 1.
robot:=synthetic also starts the simulated arm and cameras of `embodied-ros up` (no hardware); the
default, none, starts no robot: a real arm's drivers publish the inputs and take the commands.
Two hosts, the same config on both: host:=robot on the robot's computer starts the nodes of the
config's split.robot_nodes (the observation node and the controller by default), host:=inference
on the GPU box the others, one node per process; DDS carries the topics between them.
respawn:=true restarts a node process that ends (a crash, a kill); its node configures and
activates itself, and its exit no longer ends the launch.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition

from embodied_ros.graph.launch_plan import launch_plan, parse_remaps
from embodied_ros.node_infra.paths import default_config

# seconds a process has after SIGINT before launch escalates to SIGTERM (launch's own default, 5 s,
# is shorter than a separate-layout node process takes to deactivate and exit on a busy 2-core machine)
SHUTDOWN_GRACE_S = "30"
RESPAWN_DELAY_S = 1.0  # seconds between a node process's end and its restart (respawn:=true)


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("config", default_value=str(default_config()),
                              description="graph config YAML, or a shipped config's name (smolvla, ...)"),
        DeclareLaunchArgument("bundle", default_value="", description="model bundle (default: the config's)"),
        DeclareLaunchArgument("layout", default_value="composed", choices=["composed", "separate"],
                              description="composed: one process; separate: one process per node"),
        DeclareLaunchArgument("robot", default_value="none", choices=["none", "synthetic"],
                              description="none: a real robot's drivers; synthetic: the simulated arm and cameras"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of every node and topic"),
        DeclareLaunchArgument("remaps", default_value="", description="comma-separated FROM:=TO topic remaps"),
        DeclareLaunchArgument("host", default_value="all", choices=["all", "robot", "inference"],
                              description="all: the whole graph; robot / inference: that host's nodes of "
                                          "the config's split.robot_nodes, one process each"),
        DeclareLaunchArgument("respawn", default_value="false", choices=["false", "true"],
                              description="restart a node process that ends; the node then starts itself"),
        OpaqueFunction(function=_graph_actions),
    ])


def _graph_actions(context):
    def argument(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    remappings = parse_remaps(argument("remaps"))
    actions = []
    for process in launch_plan(argument("config"), bundle=argument("bundle"), layout=argument("layout"),
                               robot=argument("robot"), host=argument("host"), respawn=argument("respawn") == "true"):
        common = dict(package="embodied_ros", executable=process.executable, namespace=argument("namespace"),
                      remappings=remappings, arguments=list(process.arguments), output="screen",
                      sigterm_timeout=SHUTDOWN_GRACE_S)
        if process.respawn:
            common.update(respawn=True, respawn_delay=RESPAWN_DELAY_S)
        else:
            common.update(on_exit=_fail_on_error_exit)
        if not process.lifecycle:
            named = dict(name=process.name, parameters=[process.parameters]) if process.parameters else {}
            actions.append(Node(**named, **common))
            continue
        node = LifecycleNode(name=process.name, parameters=[process.parameters], **common)
        activate = RegisterEventHandler(OnStateTransition(
            target_lifecycle_node=node, start_state="configuring", goal_state="inactive",
            entities=[_transition(node, Transition.TRANSITION_ACTIVATE)]))
        actions += [node, activate, _transition(node, Transition.TRANSITION_CONFIGURE)]
    return actions


def _fail_on_error_exit(event, context):
    """A graph process that ends with an error (the container without its bundle) ends the launch
    with exit status 1 instead of 0."""
    if event.returncode != 0:
        raise RuntimeError(f"{event.process_name} exited with status {event.returncode}")


def _transition(node, transition_id: int) -> EmitEvent:
    return EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(node), transition_id=transition_id))
