"""The env's PyTorch against the GPUs and the plan; the CUDA toolkit against the plan: the
verify checks of family "torch" in gpufleet.node.health.check_registry, one test_<name> each."""

from gpufleet.node.health.check_registry import suite_tests

globals().update(suite_tests("torch"))
