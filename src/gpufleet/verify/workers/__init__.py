"""torchrun worker entry points (``python -m torch.distributed.run ... -m
gpufleet.verify.workers.X``).

Each worker reads RANK/LOCAL_RANK/WORLD_SIZE from torchrun, picks the backend (NCCL when
every local rank has its own CUDA device, gloo otherwise), initialises the default process
group with an explicit timeout and writes one JSON file per rank (``rank<N>.json``) into
``--out-dir``. The pytest suite (smoke_tests/) and the cluster report read those files; the
workers themselves never decide pass/fail except through their exit code (0 ok, 1 a
property did not hold, 2 bad arguments).

``gpufleet.verify.workers.supervise`` runs torchrun in its own process group with a hard timeout.
"""
