"""The node: detection, cluster wiring, preflight, cache and exec. Reads the machine; builds on core."""
