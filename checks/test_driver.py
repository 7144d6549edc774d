"""Driver, kernel modules and GPU inventory: the verify checks of family "driver" in
gpufleet.node.health.check_registry, one test_<name> each."""

from gpufleet.node.health.check_registry import suite_tests

globals().update(suite_tests("driver"))
