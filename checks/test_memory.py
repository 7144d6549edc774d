"""GPU memory health: ECC mode, uncorrectable errors, page retirement, row remapping: the
verify checks of family "memory" in gpufleet.node.health.check_registry, one test_<name> each."""

from gpufleet.node.health.check_registry import suite_tests

globals().update(suite_tests("memory"))
