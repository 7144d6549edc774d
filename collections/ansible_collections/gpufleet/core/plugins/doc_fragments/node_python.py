# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """The ``python`` option of the action plugins that run ``python -m gpufleet...`` on a
    node (sync_suites, fetch_results)."""

    DOCUMENTATION = r"""
options:
  python:
    description: The node's env python (it must have the gpufleet package).
    type: str
    required: true
"""
