"""The `embodied-ros` command line."""
