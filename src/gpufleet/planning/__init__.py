"""Planning: what works with what, decided before any node is touched.

compat (the one compatibility table, data/compat.json), versions, gpuarch (compute
capabilities, codenames), pci (NVIDIA devices from lspci/sysfs), osinfo (EL targets),
planner (make_plan), driver_choice (driver flavour, branch, packages), network (the cluster
network a node will have), matrix (the README support matrix).
"""
