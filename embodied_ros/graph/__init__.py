"""The graph around the nodes: config, schedule, stage transport, composition, lock-step driver, `up`."""
