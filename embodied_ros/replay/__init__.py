"""Rosbag2 replay through the node graph, synthetic episodes, reports and latency checks.

    bag_reader.read_episode(bag, TopicMap)      a bag (MCAP or sqlite3, any writer) -> Episode
    synthetic.write_episode(path, config)       a synthetic robot episode -> new bag
    runner.replay(bag, out, GraphConfig, ReplayOptions)   -> new bag + metrics.json + report.html
    latency.load_budget(name) / evaluate(...)   per-deployment latency budgets and their check
    latency_probe.measure_latency(budget, config)  the check the latency tests run on a live graph

Nothing here writes into an input bag. docs/replay.md describes the commands and every output.
"""
