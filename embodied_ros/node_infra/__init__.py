"""What every node is built on: configuration, the node table, topics and QoS, stage transport, the
schedule, statistics and spin threads. The nodes (embodied_ros/nodes/) import it; the assembly of nodes
into a graph (embodied_ros/graph/) imports both."""
