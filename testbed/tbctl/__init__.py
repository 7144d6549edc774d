"""gpufleet testbed: a simulated EL cluster on one Debian machine (see docs/testbed.md)."""
