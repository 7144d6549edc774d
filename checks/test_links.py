"""Interconnect and clocks: PCIe link, NVLink, clock event reasons, Xid errors: the verify
checks of family "links" in gpufleet.node.health.check_registry, one test_<name> each."""

from gpufleet.node.health.check_registry import suite_tests

globals().update(suite_tests("links"))
