"""Provisioning: the controller-side logic of the roles.

preflight_probe (the read-only node probe and its verdict), converge_digest (the converged
fast path's inputs digest), fabric_packages (Fabric Manager / NVLSM packages), node_env
(torch wheel choice, mirror URL checks, the node manifest), driver_smi (nvidia-smi's driver
against the install and the plan).
"""
