"""gpufleet.inputs.connection: the ssh options in connection variables that run a command
on the controller, in every spelling ssh accepts, and the check play's warnings."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.inputs.connection import (
    SSH_ARG_VARIABLES,
    CommandOption,
    command_options,
    connection_warnings,
    ssh_options,
)

BASTION = "ssh -W %h:%p -q admin@bastion.example"


@pytest.mark.parametrize(
    ("args", "keyword", "value"),
    [
        (f'-o ProxyCommand="{BASTION}"', "ProxyCommand", BASTION),
        (f"-o 'ProxyCommand={BASTION}'", "ProxyCommand", BASTION),
        (f"-oProxyCommand='{BASTION}'", "ProxyCommand", BASTION),
        (f'-o "ProxyCommand {BASTION}"', "ProxyCommand", BASTION),
        (f'-o "ProxyCommand = {BASTION}"', "ProxyCommand", BASTION),
        ("-o proxycommand=nc\\ %h\\ %p", "ProxyCommand", "nc %h %p"),
        ("-o PROXYCOMMAND='nc %h %p'", "ProxyCommand", "nc %h %p"),
        ("-C -o ControlMaster=auto -o ProxyCommand='nc %h %p'", "ProxyCommand", "nc %h %p"),
        # flags grouped as getopt allows: -q, -C, then o with its value in the next word
        ("-qCo ProxyCommand='nc %h %p'", "ProxyCommand", "nc %h %p"),
        ("-o LocalCommand='touch /tmp/x'", "LocalCommand", "touch /tmp/x"),
        ("-olocalcommand=id", "LocalCommand", "id"),
        ("-o PermitLocalCommand=yes", "PermitLocalCommand", "yes"),
        ("-oPermitLocalCommand=YES", "PermitLocalCommand", "YES"),
        ("-o 'permitlocalcommand yes'", "PermitLocalCommand", "yes"),
    ],
)
def test_a_command_option_is_found_in_every_spelling(args: str, keyword: str, value: str) -> None:
    assert command_options({"ansible_ssh_common_args": args}) == [
        CommandOption("ansible_ssh_common_args", keyword, value)
    ]


@pytest.mark.parametrize(
    "args",
    [
        "-o ProxyJump=admin@bastion.example",
        "-J admin@bastion.example",
        "-oProxyJump=bastion -o StrictHostKeyChecking=accept-new",
        "-o ProxyCommand=none",
        "-o PermitLocalCommand=no",
        "-o ControlMaster=auto -o ControlPersist=60s",
        # the word after a flag that takes a value is that flag's value, not an option
        "-F ProxyCommand -i /home/admin/.ssh/id_ed25519",
        "-l proxycommand",
        "",
    ],
)
def test_no_command_no_warning(args: str) -> None:
    assert command_options({"ansible_ssh_extra_args": args}) == []


@pytest.mark.parametrize("variable", SSH_ARG_VARIABLES)
def test_every_ssh_argument_variable_is_read(variable: str) -> None:
    hits = command_options({variable: "-o ProxyCommand='nc %h %p'"})
    assert [h.variable for h in hits] == [variable]


def test_other_variables_are_not_read() -> None:
    hostvars = {
        "ansible_host": "-o ProxyCommand=x",
        "gpufleet_master": "-oProxyCommand=x",
        "ansible_ssh_common_args": None,
    }
    assert command_options(hostvars) == []


def test_every_hit_of_every_variable_is_reported_in_order() -> None:
    hostvars = {
        "ansible_ssh_extra_args": "-o LocalCommand=id -o PermitLocalCommand=yes",
        "ansible_ssh_common_args": "-o ProxyCommand='nc %h %p'",
    }
    assert [(h.variable, h.keyword) for h in command_options(hostvars)] == [
        ("ansible_ssh_common_args", "ProxyCommand"),
        ("ansible_ssh_extra_args", "LocalCommand"),
        ("ansible_ssh_extra_args", "PermitLocalCommand"),
    ]


def test_an_unclosed_quote_is_still_read_word_by_word() -> None:
    assert list(ssh_options("-o ProxyCommand='nc")) == ["ProxyCommand='nc"]
    hits = command_options({"ansible_ssh_args": "-o ProxyCommand='nc %h %p"})
    assert [h.keyword for h in hits] == ["ProxyCommand"]


def test_a_list_value_is_taken_as_words() -> None:
    hits = command_options({"ansible_ssh_args": ["-o", "ProxyCommand=nc %h %p"]})
    assert hits == [CommandOption("ansible_ssh_args", "ProxyCommand", "nc %h %p")]


def test_a_trailing_o_without_value_is_no_option() -> None:
    assert list(ssh_options("-C -o")) == [""]
    assert command_options({"ansible_ssh_args": "-C -o"}) == []


def test_warnings_name_the_node_variable_and_command_and_skip_clean_nodes() -> None:
    hostvars: dict[str, dict[str, Any]] = {
        "gpu01": {"ansible_ssh_common_args": f"-o ProxyCommand='{BASTION}'"},
        "gpu02": {"ansible_ssh_common_args": "-o ProxyJump=bastion"},
        "gpu03": {"ansible_scp_extra_args": "-oPermitLocalCommand=yes"},
    }
    warnings = connection_warnings(hostvars, ["gpu01", "gpu02", "gpu03"])
    assert len(warnings) == 2
    first, second = warnings
    assert first.startswith("WARNING: node gpu01: ansible_ssh_common_args sets ProxyCommand")
    assert BASTION in first and "ProxyJump" in first and "docs/security.md" in first
    assert second.startswith("WARNING: node gpu03: ansible_scp_extra_args sets PermitLocalCommand")


def test_a_long_command_is_shortened_in_the_warning() -> None:
    command = "sh -c '" + "x" * 300 + "'"
    (warning,) = connection_warnings(
        {"n1": {"ansible_ssh_args": ["-o", f"ProxyCommand={command}"]}}, ["n1"]
    )
    assert command not in warning and command[:100] in warning and "x..." in warning


def test_only_the_hosts_asked_for_are_read() -> None:
    hostvars = {"n1": {"ansible_ssh_args": "-o LocalCommand=id"}, "n2": {}}
    assert connection_warnings(hostvars, ["n2"]) == []
