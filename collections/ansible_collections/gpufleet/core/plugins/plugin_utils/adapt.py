"""Shared by the gpufleet.core filter and action plugins (controller side only).

The filters are thin adapters over the gpufleet package installed in the controller venv
(`make setup`): import it with a message that says how to get it, and turn its input errors
into AnsibleFilterError so the task fails with the text that names the variable to fix.
"""

from __future__ import annotations

import inspect
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleFilterError


@contextmanager
def gpufleet_required() -> Iterator[None]:
    """Wraps the plugin's ``from gpufleet import ...``: an ImportError becomes an
    AnsibleFilterError telling the user to run `make setup`. A plain import statement (not
    importlib) so that mypy checks every adapter against the gpufleet function it calls."""
    try:
        yield
    except ImportError as exc:  # pragma: no cover - depends on the controller environment
        raise AnsibleFilterError(
            "the gpufleet.core filters need the gpufleet package on the controller; "
            "run `make setup` and use .venv/bin/ansible-playbook"
        ) from exc


@contextmanager
def gpufleet_required_by(action: str) -> Iterator[None]:
    """The same for an action plugin: an ImportError fails the task naming the action."""
    try:
        yield
    except ImportError as exc:  # pragma: no cover - depends on the controller environment
        raise AnsibleActionFail(
            f"{action} needs the gpufleet package on the controller; "
            "run `make setup` and use .venv/bin/ansible-playbook"
        ) from exc


def require_args(action: str, args: dict[str, Any], keys: Iterable[str]) -> None:
    """Fail the task naming every argument of ``keys`` that is missing or empty."""
    missing = [k for k in keys if not args.get(k)]
    if missing:
        raise AnsibleActionFail(f"{action} needs {', '.join(missing)}")


def _reraised(
    func: Callable[..., Any], errors: tuple[type[BaseException], ...]
) -> Callable[..., Any]:
    """``func`` with ``errors`` re-raised as AnsibleFilterError (message kept)."""

    def inner(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except errors as exc:
            raise AnsibleFilterError(str(exc)) from exc

    inner.__name__ = func.__name__
    inner.__doc__ = func.__doc__
    return inner


def as_filters(
    funcs: Iterable[Callable[..., Any]], errors: tuple[type[BaseException], ...]
) -> dict[str, Callable[..., Any]]:
    """{name: func} with `errors` re-raised as AnsibleFilterError (message kept)."""
    return {f.__name__: _reraised(f, errors) for f in funcs}


def filter_module(
    doc: str,
    namespace: Mapping[str, Any],
    errors: tuple[type[BaseException], ...],
    direct: Mapping[str, Callable[..., Any]] | None = None,
) -> type:
    """The ``FilterModule`` class of a filter plugin: its filters are the public functions
    the plugin defines (``namespace`` is its ``globals()``) and ``direct``, gpufleet
    functions registered under a filter name as they are; ``errors`` are re-raised as
    AnsibleFilterError."""
    own = [
        value
        for name, value in namespace.items()
        if not name.startswith("_")
        and inspect.isfunction(value)
        and value.__module__ == namespace["__name__"]
    ]
    table = {
        **as_filters(own, errors),
        **{name: _reraised(func, errors) for name, func in (direct or {}).items()},
    }

    class FilterModule:
        __doc__ = doc

        def filters(self) -> dict[str, Callable[..., Any]]:
            return dict(table)

    return FilterModule


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def task_environment(action: Any, name: str) -> dict[str, str]:
    """An action plugin's task ``environment:`` (play, block and task levels merged and
    templated), for the plain commands it runs: a module gets it from Ansible, a command
    run with ``_low_level_execute_command`` does not. Fails on a name that is not an
    environment variable's."""
    if not getattr(action._task, "environment", None):
        return {}
    env: dict[str, Any] = {}
    action._compute_environment_string(env)
    bad = [k for k in env if not _ENV_NAME.match(str(k))]
    if bad:
        raise AnsibleActionFail(f"{name}: not an environment variable name: {bad!r}")
    return {str(k): str(v) for k, v in env.items()}


def env_argv(env: dict[str, str]) -> list[str]:
    """``env K=V ...`` to put in front of an argv ([] when there is nothing to set)."""
    return ["env", *(f"{k}={v}" for k, v in env.items())] if env else []


def gpufleet_argv(python: object, module: str, *args: str) -> list[str]:
    """``PYTHON -m gpufleet.MODULE ARGS``: a gpufleet module run by the node's env python."""
    return [str(python), "-m", f"gpufleet.{module}", *args]


def run_plain(
    action: Any, name: str, argv: list[str], env: bool = True, in_data: bytes | None = None
) -> dict[str, Any]:
    """``argv`` as one plain command on the node (no module shipped; with become when the
    task has it), under the task's environment unless ``env`` is false, ``in_data`` on its
    stdin."""
    prefix = env_argv(task_environment(action, name)) if env else []
    cmd = shlex.join([*prefix, *argv])
    res: dict[str, Any] = action._low_level_execute_command(cmd, sudoable=True, in_data=in_data)
    return res


def output_tail(res: dict[str, Any], limit: int, stdout: bool = True) -> str:
    """The end of a command's stderr (else of its stdout, when ``stdout``) for a message."""
    text = res.get("stderr") or (res.get("stdout") if stdout else "") or ""
    return str(text).strip()[-limit:]
