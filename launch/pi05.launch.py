"""`ros2 launch embodied_ros pi05.launch.py [ARGUMENTS]`: graph.launch.py, whose default config is pi0.5's;
every argument of graph.launch.py applies (config:=smolvla runs another family)."""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource


def generate_launch_description() -> LaunchDescription:
    graph = PythonLaunchDescriptionSource(str(Path(__file__).with_name("graph.launch.py")))
    return LaunchDescription([IncludeLaunchDescription(graph)])
