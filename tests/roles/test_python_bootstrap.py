"""python_bootstrap on an EL8 os-release: python3.11 is installed with dnf (raw) only when
missing, then used as the interpreter; a rerun runs no dnf. A scripted dnf on PATH records
its calls and "installs" the interpreter by linking the test's Python."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from roles_driver_helpers import ansible_playbook

EL8 = 'NAME="AlmaLinux"\nVERSION="8.10 (Cerulean Leopard)"\nID="almalinux"\nVERSION_ID="8.10"\n'


def _changed(stdout: str) -> int:
    m = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)", stdout)
    assert m, stdout[-2000:]
    return int(m.group(1))


def _setup(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "dnf-calls.log"
    interp = tmp_path / "python3.11"
    dnf = bindir / "dnf"
    dnf.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        echo "$*" >> {log}
        case "$*" in
          *nogpgcheck*) exit 99 ;;
          *"install"*python3.11*) ln -sf {sys.executable} {interp}; echo Complete! ;;
          *) exit 64 ;;
        esac
        """),
        encoding="utf-8",
    )
    dnf.chmod(0o755)
    osr = tmp_path / "os-release"
    osr.write_text(EL8, encoding="utf-8")
    play = tmp_path / "play.yml"
    play.write_text(
        textwrap.dedent(f"""\
        - hosts: localhost
          gather_facts: false
          roles:
            - role: python_bootstrap
              vars:
                python_bootstrap_os_release_file: {osr}
                python_bootstrap_el8_interpreter: {interp}
          tasks:
            - name: report
              ansible.builtin.copy:
                dest: {tmp_path}/result.json
                mode: "0644"
                content: >-
                  {{{{ {{'interp': ansible_python_interpreter,
                        'os': gpufleet_os_release.ID ~ gpufleet_os_release.VERSION_ID}} | to_json }}}}
        """),
        encoding="utf-8",
    )
    return bindir, log, interp, play


# slow: two role runs; make test keeps one run-and-rerun (cluster_network)
@pytest.mark.slow
@pytest.mark.ansible
def test_el8_installs_python311_once_and_uses_it(tmp_path: Path) -> None:
    bindir, log, interp, play = _setup(tmp_path)
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    first = ansible_playbook(play, env=env, interpreter=False)
    assert first.returncode == 0, first.stdout[-3000:]
    calls = log.read_text(encoding="utf-8").splitlines()
    assert calls == ["-y install python3.11"]
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert result == {"interp": str(interp), "os": "almalinux8.10"}
    assert _changed(first.stdout) == 2  # the dnf install and the test's report file

    second = ansible_playbook(play, env=env, interpreter=False)
    assert second.returncode == 0, second.stdout[-3000:]
    assert log.read_text(encoding="utf-8").splitlines() == calls  # no second dnf run
    assert _changed(second.stdout) == 0


@pytest.mark.ansible
def test_el8_missing_interpreter_without_install_fails_naming_the_variable(
    tmp_path: Path,
) -> None:
    bindir, log, _, play = _setup(tmp_path)
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    res = ansible_playbook(play, "-e", "python_bootstrap_install=false", env=env, interpreter=False)
    assert res.returncode != 0
    assert "python_bootstrap_el8_interpreter" in res.stdout
    assert "python_bootstrap_install: true" in res.stdout
    assert not log.exists()


@pytest.mark.slow
@pytest.mark.ansible
def test_el8_install_from_a_mirror_with_credentials_keeps_them_off_command_lines(
    tmp_path: Path,
) -> None:
    """The base mirror's URL carries credentials: dnf gets the mirror as a 0600 repository
    file (username=/password=) from a script file, never on its command line; the output
    (-vvv) holds no password; the node's directory and the controller's script are gone."""
    bindir, log, interp, play = _setup(tmp_path)
    seen = tmp_path / "repo-file"
    (bindir / "dnf").write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        echo "$*" >> {log}
        for a in "$@"; do case "$a" in --setopt=reposdir=*) d=${{a##*,}};; esac; done
        {{ stat -c %a "$d/gpufleet-base-bootstrap.repo"; cat "$d/gpufleet-base-bootstrap.repo"; }} > {seen}
        echo "$d" >> {seen}.dir
        ln -sf {sys.executable} {interp}; echo Complete!
        """),
        encoding="utf-8",
    )
    secret = "Pw-7c1b9e"
    url = f"https://site:{secret}@mirror.lan/base/8"
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    res = ansible_playbook(
        play, "-vvv", "-e", f"gpufleet_base_repo_baseurl={url}",
        "-e", "gpufleet_base_repo_gpgkey_url=https://mirror.lan/keys/base.asc",
        env=env, interpreter=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:]
    (call,) = log.read_text(encoding="utf-8").splitlines()
    assert call.startswith("-y install --setopt=reposdir=/etc/yum.repos.d,") and call.endswith(
        " python3.11"
    )
    text = seen.read_text(encoding="utf-8")
    assert text.startswith("600\n[gpufleet-base-bootstrap]\n")
    assert "baseurl=https://mirror.lan/base/8\n" in text
    assert f"username=site\npassword={secret}\n" in text
    assert "gpgcheck=1\ngpgkey=https://mirror.lan/keys/base.asc\n" in text
    assert secret not in res.stdout + res.stderr, "the password in ansible-playbook -vvv output"
    assert not Path((tmp_path / "repo-file.dir").read_text().strip()).exists()
    assert not list(Path("/tmp").glob("ansible*.gpufleet-bootstrap.sh")), "controller script left"
