"""Verify: one verify run across the nodes.

run_id, verify_run (make verify as a command), detached_job (detached node jobs), result_pack
(results fetched in one command), suite_sync (suites written once), bandwidth (nccl-tests
formulas, the all-reduce sweep, thresholds), collective_ops (every other collective), tiers
(quick, standard, burnin), launchers (how ranks start: ssh, slurm), workers (the torchrun
entry points).
"""
