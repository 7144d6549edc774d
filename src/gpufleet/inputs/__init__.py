"""Inputs: the checks an inventory passes before any change (docs/security.md).

boundary (the value rules of every role variable), role_inputs (a role's variables through
the boundary, the planner and the network rules), inventory (the inventory as a whole),
profile_file (the system profiles' files, the shipped ones and a site's own).
"""
