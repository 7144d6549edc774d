"""Sub-commands of the gpufleet CLI (see gpufleet.cli.COMMANDS)."""

from __future__ import annotations

import argparse
from typing import Any


def add_command(sub: Any, name: str, help_text: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of sub-command ``name``; its --help shows ``doc`` (the module docstring)
    as written."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help_text,
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser
