"""gpufleet: from bare EL GPU nodes to a verified PyTorch distributed-training cluster."""

__version__ = "0.1.0"
