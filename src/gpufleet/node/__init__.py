"""Node: what is read and judged on one node (no torch needed unless named).

nvml (the NVML reader and recordings), health (check verdicts from NVML readings),
fast_checks (gpufleet health's fast path), pass_state (what a node keeps between health
passes), drain_policy (when a failed pass drains the node), textfile (a pass as Prometheus
metrics), facts (torch build, modules, PCI GPUs), nvswitch (Fabric Manager, GPU fabric
state), ib_ports (InfiniBand/RoCE, GPUDirect RDMA), xid (kernel log), dcgm (dcgmi diag),
nccl_transport (NCCL INFO log), netprobe (TCP pre-check), compute (matmul TFLOP/s and SDC
verdicts per device), compute_bench (their torch side), compute_run (gpufleet compute, the
burn-in), burnin (burn-in verdicts), gpu_sampler (NVML samples), perftest (ib_write_bw output
and verdict), ib_bw (gpufleet ibbw), dp_balance (DataParallel's GPU-0 memory).
"""
