"""NVSwitch fabric and cluster network: Fabric Manager, GPU fabric state, InfiniBand/RoCE
ports, GPUDirect RDMA (gpufleet.node.nvswitch, gpufleet.node.ib_ports; docs/hgx.md): the verify
checks of family "fabric" in gpufleet.node.health.check_registry, one test_<name> each."""

from gpufleet.node.health.check_registry import suite_tests

globals().update(suite_tests("fabric"))
