"""Connection variables that make ssh run a command on the controller.

gpufleet trusts Ansible's connection and privilege-escalation variables the way Ansible
does (docs/security.md, "Trust boundary"): whoever writes the inventory can already run
commands as the user running ansible-playbook. It does not refuse them; it names the ssh
options that run a local command so that an admin reading the check play's output sees
them: ``ProxyCommand`` (ssh starts it to reach the node), ``LocalCommand`` (ssh runs it on
the controller after connecting) and ``PermitLocalCommand=yes`` (lets a LocalCommand from
an ssh_config file run). ``ProxyJump`` runs ssh itself and is not reported.

ssh options: https://man.openbsd.org/ssh_config (ProxyCommand, LocalCommand,
PermitLocalCommand) and https://man.openbsd.org/ssh (``-o option``; an option is written
``Keyword=value`` or ``Keyword value``, keywords are case-insensitive). Ansible passes these
variables to ssh, scp and sftp after splitting them with shlex:
https://docs.ansible.com/ansible/latest/collections/ansible/builtin/ssh_connection.html
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

#: Inventory variables whose words Ansible hands to ssh, scp or sftp.
SSH_ARG_VARIABLES = (
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_ssh_args",
    "ansible_scp_extra_args",
    "ansible_sftp_extra_args",
)

#: ssh/scp/sftp single-letter flags that take a value (the next word when not attached).
#: ``o`` is handled apart: its value is the option this module reads.
_FLAGS_WITH_VALUE = frozenset("BbcDEeFIiJLlmOPpQRSsWwX")
_KEYWORD = re.compile(r"\s*([A-Za-z]+)\s*(?:=\s*|\s+|$)(.*)\Z", re.DOTALL)
_CANONICAL = {
    "proxycommand": "ProxyCommand",
    "localcommand": "LocalCommand",
    "permitlocalcommand": "PermitLocalCommand",
}


@dataclass(frozen=True)
class CommandOption:
    """One ssh option in a connection variable that runs a command on the controller."""

    variable: str
    keyword: str
    value: str


def _words(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    text = str(value)
    try:
        return shlex.split(text)
    except ValueError:  # an unclosed quote: ssh would never start, still read each word
        return text.split()


def ssh_options(value: Any) -> Iterator[str]:
    """The ``-o`` options among the words of one ssh/scp/sftp argument string:
    ``-o Opt=v``, ``-oOpt=v`` and ``-vo Opt=v`` (flags grouped as getopt allows)."""
    words = _words(value)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word in ("-", "--"):
            continue
        for pos, flag in enumerate(word[1:], start=2):
            if flag != "o" and flag not in _FLAGS_WITH_VALUE:
                continue
            attached = word[pos:]
            if not attached:
                attached = words[i] if i < len(words) else ""
                i += 1
            if flag == "o":
                yield attached
            break


def command_option(option: str) -> tuple[str, str] | None:
    """(keyword, value) when one ssh ``-o`` option runs or allows a local command."""
    match = _KEYWORD.match(option)
    if not match:
        return None
    keyword = _CANONICAL.get(match.group(1).lower())
    value = match.group(2).strip()
    if keyword is None:
        return None
    if keyword == "PermitLocalCommand":
        return (keyword, value) if value.lower() == "yes" else None
    if keyword == "ProxyCommand" and value.lower() == "none":
        return None  # "none" disables a ProxyCommand from ssh_config
    return keyword, value


def command_options(hostvars: Mapping[str, Any]) -> list[CommandOption]:
    """Every option of :data:`SSH_ARG_VARIABLES` in one host's variables that runs a
    command on the controller, in variable order."""
    found = []
    for variable in SSH_ARG_VARIABLES:
        value = hostvars.get(variable)
        if value is None or value == "":
            continue
        for option in ssh_options(value):
            hit = command_option(option)
            if hit:
                found.append(CommandOption(variable, *hit))
    return found


def warning(host: str, hit: CommandOption) -> str:
    """The check play's message for one option on one node: what runs where, and why
    gpufleet only reports it."""
    boundary = "gpufleet does not check connection variables (docs/security.md, trust boundary)"
    if hit.keyword == "PermitLocalCommand":
        return (
            f"WARNING: node {host}: {hit.variable} sets PermitLocalCommand=yes: ssh then runs "
            "the LocalCommand of any ssh_config file it reads, on the controller, as the user "
            f"running ansible-playbook. {boundary}: remove it unless you need it."
        )
    shown = hit.value if len(hit.value) <= 120 else hit.value[:117] + "..."
    return (
        f"WARNING: node {host}: {hit.variable} sets {hit.keyword} {shown!r}: ssh runs this "
        "command on the controller, as the user running ansible-playbook, whenever Ansible "
        f"connects to {host}. {boundary}: keep it only if whoever writes this inventory may "
        "run commands as you; to reach a node through a bastion, -o ProxyJump=<host> runs "
        "no command."
    )


def connection_warnings(
    hostvars: Mapping[str, Mapping[str, Any]], hosts: Iterable[str]
) -> list[str]:
    """One warning per node and option, for ``playbooks/check_inventory.yml``."""
    return [warning(str(host), hit) for host in hosts for hit in command_options(hostvars[host])]
