"""gpufleet.core.dnf_cli: idempotency against scripted dnf/rpm executables that record calls."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from roles_driver_helpers import (
    ansible_playbook,
    fake_pm,
    install_collection_finder,
    pkg,
    read_state,
)

install_collection_finder()

from ansible_collections.gpufleet.core.plugins.module_utils import dnf_cli as D  # noqa: E402

MOD = "nvidia-driver"
KVER = "4.18.0-553.el8_10.x86_64"


def _driver_available() -> list[dict[str, Any]]:
    out = []
    for stream, names in {
        "580-open": ["nvidia-open", "kmod-nvidia-open-dkms", "nvidia-driver"],
        "580-dkms": ["cuda-drivers", "kmod-nvidia-latest-dkms", "nvidia-driver"],
        "590-open": ["nvidia-open", "kmod-nvidia-open-dkms", "nvidia-driver"],
    }.items():
        version = "590.44.01" if stream.startswith("590") else "580.95.05"
        for n in names:
            out.append(pkg(n, version, epoch=3, module=MOD, stream=stream))
    return out


def _modules(enabled: str | None = None, disabled: bool = False) -> dict[str, Any]:
    return {
        MOD: {
            "streams": ["580-dkms", "580-open", "590-open", "open-dkms"],
            "default": "open-dkms",
            "enabled": enabled,
            "disabled": disabled,
        }
    }


def _switch_to_580_open() -> D.Params:
    """Module parameters: switch the driver module to 580-open and install nvidia-open."""
    return {
        "module_stream": f"{MOD}:580-open",
        "module_action": "switch-to",
        "allowerasing": True,
        "name": ["nvidia-open"],
    }


def _env_on_stream(tmp_path: Path, stream: str) -> Env:
    """The driver module enabled at ``stream`` with that stream's packages installed."""
    avail = _driver_available()
    installed = [p for p in avail if p["stream"] == stream]
    return Env(
        tmp_path,
        {"available": avail, "installed": installed, "modules": _modules(enabled=stream)},
    )


class Env:
    def __init__(self, tmp_path: Path, state: dict[str, Any]) -> None:
        self.bindir, self.state_path = fake_pm(tmp_path, state)

    def runner(self, argv: list[str]) -> tuple[int, str, str]:
        env = dict(os.environ, FAKE_PM_STATE=str(self.state_path), LC_ALL="C")
        p = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        return p.returncode, p.stdout, p.stderr

    def cli(self, check_mode: bool = False) -> D.DnfCli:
        return D.DnfCli(
            self.runner,
            check_mode=check_mode,
            dnf=str(self.bindir / "dnf"),
            rpm=str(self.bindir / "rpm"),
        )

    @property
    def state(self) -> dict[str, Any]:
        return read_state(self.state_path)

    def writes(self) -> list[list[str]]:
        """dnf calls that can change the system."""
        return [
            c
            for c in self.state["calls"]
            if c[0] == "dnf"
            and any(
                w in c for w in ("install", "remove", "upgrade", "enable", "switch-to", "reset")
            )
        ]

    def clear_calls(self) -> None:
        s = self.state
        s["calls"] = []
        self.state_path.write_text(json.dumps(s), encoding="utf-8")


def test_install_missing_then_rerun_is_a_no_op(tmp_path: Path) -> None:
    env = Env(
        tmp_path,
        {
            "available": [pkg("dkms", "3.1.8"), pkg("gcc-c++", "11.5")],
            "installed": [pkg("gcc-c++", "11.5")],
        },
    )
    r = env.cli().run({"name": ["dkms", "gcc-c++"]})
    assert r["changed"] is True
    assert r["installed"] == ["dkms-0:3.1.8-1.el9.x86_64"]
    assert [c[-2:] for c in env.writes()] == [["install", "dkms"]]  # gcc-c++ not asked for
    env.clear_calls()
    r2 = env.cli().run({"name": ["dkms", "gcc-c++"]})
    assert r2["changed"] is False
    assert env.writes() == []
    assert r2["msg"] == "nothing to do"


def test_provide_spec_for_running_kernel_is_normalised_and_idempotent(tmp_path: Path) -> None:
    kd = pkg(
        "kernel-devel", "4.18.0", release="553.el8_10", provides=[f"kernel-devel-uname-r = {KVER}"]
    )
    env = Env(tmp_path, {"available": [kd]})
    spec = f"kernel-devel-uname-r == {KVER}"
    r = env.cli().run({"name": [spec]})
    assert r["changed"] is True
    install = env.writes()[0]
    assert install[-1] == f"kernel-devel-uname-r = {KVER}"  # '==' normalised to '='
    env.clear_calls()
    assert env.cli().run({"name": [spec]})["changed"] is False
    assert env.writes() == []


def test_enable_stream_from_nothing_then_rerun(tmp_path: Path) -> None:
    env = Env(tmp_path, {"available": _driver_available(), "modules": _modules()})
    p = _switch_to_580_open()
    r = env.cli().run(p)
    assert r["changed"] is True
    assert (r["module_before"], r["module_after"]) == (None, "580-open")
    verbs = [c[c.index("-y") + 1 :] for c in env.writes()]
    assert ["--allowerasing", "module", "enable", f"{MOD}:580-open"] in verbs
    assert any(c[-2:] == ["install", "nvidia-open"] for c in env.writes())
    assert "switch-to" not in str(env.writes())  # nothing to switch from
    env.clear_calls()
    r2 = env.cli().run(p)
    assert r2["changed"] is False
    assert env.writes() == []


def test_switch_flavour_uses_switch_to_with_allowerasing_only_on_change(tmp_path: Path) -> None:
    env = _env_on_stream(tmp_path, "580-dkms")
    p = _switch_to_580_open()
    r = env.cli().run(p)
    assert r["changed"] is True
    assert (r["module_before"], r["module_after"]) == ("580-dkms", "580-open")
    switch = [c for c in env.writes() if "switch-to" in c]
    assert len(switch) == 1 and "--allowerasing" in switch[0]
    names = {q["name"] for q in env.state["installed"]}
    assert "nvidia-open" in names and "kmod-nvidia-latest-dkms" not in names
    env.clear_calls()
    assert env.cli().run(p)["changed"] is False
    assert env.writes() == []


def test_switch_branch_upgrades_module_packages(tmp_path: Path) -> None:
    env = _env_on_stream(tmp_path, "580-open")
    r = env.cli().run(
        {
            "module_stream": f"{MOD}:590-open",
            "module_action": "switch-to",
            "allowerasing": True,
            "name": ["nvidia-open"],
        }
    )
    assert r["changed"] is True
    assert any(n.startswith("nvidia-open-3:590.44.01") for n in r["installed"])
    assert any(n.startswith("nvidia-open-3:580.95.05") for n in r["removed"])


def test_enable_refuses_to_silently_switch(tmp_path: Path) -> None:
    env = Env(tmp_path, {"available": _driver_available(), "modules": _modules("580-dkms")})
    with pytest.raises(D.DnfCliError, match="switch-to"):
        env.cli().run({"module_stream": f"{MOD}:580-open", "module_action": "enable"})
    assert env.writes() == []


def test_disabled_module_is_reset_before_enable(tmp_path: Path) -> None:
    env = Env(tmp_path, {"available": _driver_available(), "modules": _modules(disabled=True)})
    r = env.cli().run({"module_stream": f"{MOD}:580-open", "module_action": "enable"})
    assert r["changed"] is True
    verbs = [c[c.index("-y") + 1 :] for c in env.writes()]
    assert verbs == [["module", "reset", MOD], ["module", "enable", f"{MOD}:580-open"]]


def test_unknown_stream_is_an_error_naming_the_streams(tmp_path: Path) -> None:
    env = Env(tmp_path, {"available": _driver_available(), "modules": _modules()})
    with pytest.raises(D.DnfCliError, match=r"no stream 470-dkms.*580-open"):
        env.cli().run({"module_stream": f"{MOD}:470-dkms", "module_action": "switch-to"})


def test_check_mode_changes_nothing_and_reports(tmp_path: Path) -> None:
    env = Env(
        tmp_path,
        {
            "available": [*_driver_available(), pkg("dkms", "3.1.8")],
            "modules": _modules("580-dkms"),
        },
    )
    before = env.state
    r = env.cli(check_mode=True).run(
        {"module_stream": f"{MOD}:580-open", "module_action": "switch-to", "name": ["nvidia-open"]}
    )
    assert r["changed"] is True
    assert r["msg"].startswith("would:")
    assert [c[-2:] for c in r["commands"]] == [
        ["switch-to", f"{MOD}:580-open"],
        ["install", "nvidia-open"],
    ]
    after = env.state
    assert after["installed"] == before["installed"] and after["modules"] == before["modules"]
    assert env.writes() == []  # no write command ran


def test_check_mode_satisfied_reports_unchanged(tmp_path: Path) -> None:
    env = Env(tmp_path, {"installed": [pkg("dkms", "3.1.8")], "available": [pkg("dkms", "3.1.8")]})
    r = env.cli(check_mode=True).run({"name": ["dkms"]})
    assert r["changed"] is False and r["commands"] == []


def test_dnf_that_did_nothing_is_not_reported_as_change(tmp_path: Path) -> None:
    # The rpm database and the repository metadata disagree: rpm says nothing provides the
    # spec, dnf resolves it to the package that is already installed and does nothing. The
    # module must neither report a change nor claim success.
    installed = pkg("python3.11", "3.11.11", release="1.el8")
    in_repo = pkg("python3.11", "3.11.11", release="1.el8", provides=["python(abi) = 3.11"])
    env = Env(tmp_path, {"installed": [installed], "available": [in_repo]})
    with pytest.raises(D.DnfCliError, match="still not installed"):
        env.cli().run({"name": ["python(abi) = 3.11"]})
    assert env.state["installed"] == [installed]


def test_absent_removes_only_installed(tmp_path: Path) -> None:
    env = Env(tmp_path, {"installed": [pkg("nouveau-firmware", "1")]})
    r = env.cli().run({"name": ["nouveau-firmware", "not-there"], "state": "absent"})
    assert r["changed"] is True
    assert [c[-2:] for c in env.writes()] == [["remove", "nouveau-firmware"]]
    env.clear_calls()
    assert env.cli().run({"name": ["nouveau-firmware"], "state": "absent"})["changed"] is False
    assert env.writes() == []


def test_latest_upgrades_only_when_an_update_exists(tmp_path: Path) -> None:
    env = Env(
        tmp_path,
        {
            "installed": [pkg("dkms", "3.1.7")],
            "available": [pkg("dkms", "3.1.7"), pkg("dkms", "3.1.8")],
        },
    )
    r = env.cli().run({"name": ["dkms"], "state": "latest"})
    assert r["changed"] is True and r["installed"] == ["dkms-0:3.1.8-1.el9.x86_64"]
    env.clear_calls()
    assert env.cli().run({"name": ["dkms"], "state": "latest"})["changed"] is False
    assert env.writes() == []


def test_globs_hold_a_branch(tmp_path: Path) -> None:
    avail = [pkg("nvidia-open", "580.95.05", epoch=3), pkg("nvidia-open", "590.44.01", epoch=3)]
    env = Env(tmp_path, {"available": avail, "installed": [avail[1]]})
    r = env.cli().run({"name": ["nvidia-open-580.*"], "allowerasing": True})
    assert r["changed"] is True
    assert [q["version"] for q in env.state["installed"]] == ["580.95.05"]
    env.clear_calls()
    assert env.cli().run({"name": ["nvidia-open-580.*"]})["changed"] is False


def test_never_disables_gpg_checks(tmp_path: Path) -> None:
    env = Env(tmp_path, {"available": [pkg("dkms", "3.1.8")]})
    with pytest.raises(D.DnfCliError, match="GPG checking is never disabled"):
        env.cli().run({"name": ["dkms"], "enablerepo": ["epel --nogpgcheck"]})
    with pytest.raises(D.DnfCliError, match="GPG"):
        env.cli().run({"name": ["dkms"], "enablerepo": ["x"], "disablerepo": ["gpgcheck=0"]})
    assert all("nogpgcheck" not in " ".join(c) for c in env.state["calls"])


def test_module_has_no_option_to_weaken_gpg() -> None:
    import yaml

    path = (
        Path(__file__).resolve().parents[3]
        / "collections/ansible_collections/gpufleet/core/plugins/modules/dnf_cli.py"
    )
    src = path.read_text(encoding="utf-8")
    doc = yaml.safe_load(src.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
    assert not [o for o in doc["options"] if "gpg" in o]
    assert "nogpgcheck" not in src.split("DOCUMENTATION", 1)[0]
    assert set(doc["options"]) == {
        "name",
        "state",
        "module_stream",
        "module_action",
        "allowerasing",
        "enablerepo",
        "disablerepo",
        "install_weak_deps",
        "update_cache",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "nvidia-driver   580-open [e]    default [d] [i], fm, ks, src   Nvidia driver",
            {"580-open": {"e"}},
        ),
        (
            "nvidia-driver   latest-dkms [d][e]  default [d], fm  Nvidia",
            {"latest-dkms": {"d", "e"}},
        ),
        ("nvidia-driver   open-dkms       default [d], fm, ks, src   Nvidia", {"open-dkms": set()}),
        ("nodejs   18 [x]   common  Javascript", {}),
    ],
)
def test_parse_module_list(text: str, expected: dict[str, set[str]]) -> None:
    assert D.parse_module_list(text, "nvidia-driver") == expected


# slow: an ansible-playbook run; the fake-dnf cases above test the module logic
@pytest.mark.slow
@pytest.mark.ansible
def test_module_through_ansible_is_idempotent_and_check_mode_safe(tmp_path: Path) -> None:
    bindir, state_path = fake_pm(
        tmp_path, {"available": _driver_available(), "modules": _modules("580-dkms")}
    )
    play = tmp_path / "play.yml"
    play.write_text(
        textwrap.dedent(f"""\
        - hosts: localhost
          gather_facts: false
          environment:
            PATH: "{bindir}:{{{{ ansible_env.PATH | default('/usr/bin:/bin') }}}}"
            FAKE_PM_STATE: "{state_path}"
          tasks:
            - name: check mode first
              gpufleet.core.dnf_cli:
                module_stream: nvidia-driver:580-open
                module_action: switch-to
                allowerasing: true
                name: [nvidia-open]
              check_mode: true
              register: c
            - name: real
              gpufleet.core.dnf_cli:
                module_stream: nvidia-driver:580-open
                module_action: switch-to
                allowerasing: true
                name: [nvidia-open]
              register: r1
            - name: rerun
              gpufleet.core.dnf_cli:
                module_stream: nvidia-driver:580-open
                module_action: switch-to
                allowerasing: true
                name: [nvidia-open]
              register: r2
            - ansible.builtin.assert:
                that:
                  - c is changed
                  - r1 is changed
                  - r2 is not changed
                  - r1.module_after == '580-open'
                  - r2.commands == []
        """),
        encoding="utf-8",
    )
    env = {"PATH": f"{bindir}:{os.environ['PATH']}"}
    res = ansible_playbook(play, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    calls = read_state(state_path)["calls"]
    assert sum(1 for c in calls if "switch-to" in c) == 1


@pytest.mark.parametrize(
    ("pattern", "hit"),
    [
        ("nvidia-open-580.*", True),
        ("nvidia-open", True),
        ("nvidia-open-575.*", False),
        ("nvidia-open-580.95.05-1.el10", True),
        ("nvidia-*.x86_64", True),
        ("nvidia", False),
    ],
)
def test_glob_matches_like_dnf(pattern: str, hit: bool) -> None:
    """rpm -qa PATTERN matches names only; versioned globs must still find the package."""
    assert D.glob_matches("nvidia-open-3:580.95.05-1.el10.x86_64", pattern) is hit


# dnf's own words on the testbed (reports/faults/foreign-key.log, mirror-down runs)
FOREIGN = (
    'The GPG keys listed for the "cuda-rhel9-x86_64" repository are already installed but '
    "they are not correct for this package.\nError: GPG check FAILED"
)
UNREACHABLE = (
    "Curl error (7): Couldn't connect to server for http://10.213.0.1:8213/cuda/rhel9/"
    "x86_64/repodata/repomd.xml [Failed to connect to 10.213.0.1 port 8213: Connection refused]"
)


@pytest.mark.parametrize(
    ("output", "words"),
    [
        (FOREIGN, ["not signed by the key pinned", "Do not disable gpgcheck"]),
        (UNREACHABLE, ["cannot reach a repository", "proxy, firewall"]),
        ("Error: Unable to find a match: nosuchpkg", None),
    ],
    ids=["foreign-key", "unreachable", "unknown"],
)
def test_known_dnf_failures_come_with_what_to_do(output: str, words: list[str] | None) -> None:
    hint = D.remedy(output)
    if words is None:
        assert hint == ""
    else:
        assert all(w in hint for w in words), hint
