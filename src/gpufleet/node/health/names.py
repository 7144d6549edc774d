"""The JSON record names of the node checks (the pytest functions are ``test_<name>``)."""

# Check names (the JSON record names; the pytest functions are test_<name>).
DRIVER_LOADED = "driver_loaded"
DRIVER_VERSION = "driver_version"
CUDA_DRIVER_VERSION = "cuda_driver_version"
NOUVEAU = "nouveau_not_loaded"
GPU_COUNT = "gpu_count"
PERSISTENCE = "persistence_mode"
ECC_MODE = "ecc_mode"
ECC_UNCORRECTABLE = "ecc_uncorrectable_volatile"
PAGE_RETIREMENT = "page_retirement"
ROW_REMAP = "row_remap"
PCIE_LINK = "pcie_link"
NVLINK = "nvlink"
CLOCK_EVENTS = "clock_event_reasons"
XID = "xid_errors"
TORCH_CUDA = "torch_cuda_available"
TORCH_COUNT = "torch_device_count"
TORCH_ARCH = "torch_arch_list"
TORCH_CUDA_VERSION = "torch_cuda_version"
NCCL_VERSION = "nccl_version"
VISIBLE_DEVICES = "cuda_visible_devices"
TOOLKIT = "cuda_toolkit"
# the node against its system profile (gpufleet.node.profiles, docs/profiles.md)
SYSTEM_PROFILE = "profile"
# per GPU: host<->device copy bandwidth against the profile's floor (gpufleet.node.health.host_copy)
HOST_DEVICE_COPY = "host_device_copy"
# gpufleet health only: the node as provisioned, and a GPU NVML cannot read (in place of its
# per-GPU checks)
MANIFEST = "manifest"
ENV_PYTHON = "env_python"
NCCL_ENV = "nccl_env_interfaces"
GPU_READABLE = "gpu_readable"

__all__ = [
    "CLOCK_EVENTS",
    "CUDA_DRIVER_VERSION",
    "DRIVER_LOADED",
    "DRIVER_VERSION",
    "ECC_MODE",
    "ECC_UNCORRECTABLE",
    "ENV_PYTHON",
    "GPU_COUNT",
    "GPU_READABLE",
    "HOST_DEVICE_COPY",
    "MANIFEST",
    "NCCL_ENV",
    "NCCL_VERSION",
    "NOUVEAU",
    "NVLINK",
    "PAGE_RETIREMENT",
    "PCIE_LINK",
    "PERSISTENCE",
    "ROW_REMAP",
    "SYSTEM_PROFILE",
    "TOOLKIT",
    "TORCH_ARCH",
    "TORCH_COUNT",
    "TORCH_CUDA",
    "TORCH_CUDA_VERSION",
    "VISIBLE_DEVICES",
    "XID",
]
