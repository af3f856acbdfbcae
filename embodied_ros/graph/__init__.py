"""The nodes assembled into a graph: composition in one process (and its container executable), the
launch plan, separate processes, the lock-step driver, the monitor and `up`."""
