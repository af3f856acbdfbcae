"""Start the embodied_ros graph for a GR00T N1.7 bundle.

    ros2 launch embodied_ros groot.launch.py [bundle:=/path/model.gguf] [layout:=composed|separate]
        [namespace:=arm] [remaps:=joint_states:=/arm/joint_states,instruction:=/task] [config:=my.yaml]

The same graph as pi05.launch.py (whose arguments all apply), with config/groot.yaml as the
default configuration.
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
        DeclareLaunchArgument("config", default_value=str(share_path("config", "groot.yaml")),
                              description="graph config YAML"),
        IncludeLaunchDescription(graph, launch_arguments={"config": LaunchConfiguration("config")}.items()),
    ])
