"""A simulated robot arm and its cameras, as plain functions (`sim.robot`): what `embodied-ros up`'s
synthetic robot runs live and what `embodied-ros record-synthetic` writes into episodes."""
