"""ROS 2 nodes of the graph, one small class each; each module's `main` runs that node alone."""
