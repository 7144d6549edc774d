"""Run a command with extra arguments taken from an environment variable, split like
shell words but never expanded: ``make verify VERIFY_ARGS='-e x=1'`` and friends.

    python -m gpufleet.argsplit ENV_VAR MAKE_NAME -- COMMAND [ARG...]

executes ``COMMAND ARG... <words of $ENV_VAR>``. The words come from :func:`shlex.split`
(quotes group words), so backticks, ``$(...)``, ``;`` and globs stay literal text handed to
the command: a make variable is data, never shell code. A value that cannot be split (an
unclosed quote) is refused with exit 2 naming ``MAKE_NAME``.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from typing import NoReturn

from gpufleet.errors import EXIT_REFUSED


def words(value: str, name: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise ValueError(
            f"ERROR: {name}={value!r} is refused ({exc}) -> allowed: arguments separated by "
            "spaces, quoted with '...' or \"...\" where one holds a space"
        ) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[2] != "--":
        print("usage: python -m gpufleet.argsplit ENV_VAR MAKE_NAME -- COMMAND [ARG...]",
              file=sys.stderr)  # fmt: skip
        return EXIT_REFUSED
    env_var, name, cmd = args[0], args[1], args[3:]
    try:
        extra = words(os.environ.get(env_var, ""), name)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_REFUSED
    return _exec([*cmd, *extra])


def _exec(argv: list[str]) -> NoReturn:
    """Replace this process with ``argv``: its exit code is the command's."""
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    sys.exit(main())
