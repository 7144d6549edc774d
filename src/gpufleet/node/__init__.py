"""Node: what is read and judged on one node (no torch needed unless named).

nvml (the NVML reader and recordings), health (check verdicts from NVML readings),
fast_checks (gpufleet health's fast path), facts (torch build, modules, PCI GPUs), nvswitch
(Fabric Manager, GPU fabric state), ib_ports (InfiniBand/RoCE, GPUDirect RDMA), xid (kernel
log), dcgm (dcgmi diag), nccl_transport (NCCL INFO log), netprobe (TCP pre-check).
"""
