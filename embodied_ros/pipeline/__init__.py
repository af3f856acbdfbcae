"""The runtime core the nodes wrap: stage contracts, the data passed between stages, the model registry."""
