"""embodied_ros: embodied-AI models (pi0.5, world-action models) as a pipeline of ROS 2 nodes."""

__version__ = "0.1.0"
