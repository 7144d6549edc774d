"""Launchers: how the ranks of a verify step start on the nodes (docs/verify.md)."""
