"""Start the embodied_ros graph for a LingBot-VA world-action bundle (LeRobot's LingBotVAPolicy layout).

    ros2 launch embodied_ros lingbot_va.launch.py [bundle:=/path/model.gguf] [layout:=composed|separate]
        [robot:=none|synthetic] [namespace:=arm] [remaps:=joint_states:=/arm/joint_states,instruction:=/task]
        [config:=my.yaml]

The same graph as pi05.launch.py (whose arguments all apply), with config/lingbot_va.yaml as the
default configuration: the world predictor node runs every `schedule.world` steps and the action
head streams its latest prediction (the world node carries the episode from run to run).
"""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from embodied_ros.share import share_path


def generate_launch_description() -> LaunchDescription:
    graph = PythonLaunchDescriptionSource(str(Path(__file__).with_name("pi05.launch.py")))
    return LaunchDescription([
        DeclareLaunchArgument("config", default_value=str(share_path("config", "lingbot_va.yaml")),
                              description="graph config YAML"),
        IncludeLaunchDescription(graph, launch_arguments={"config": LaunchConfiguration("config")}.items()),
    ])
