"""Two hosts on one machine for the split graph: network namespaces, a shaped link, its faults."""
