"""Credentials in mirror URLs, as users paste them (``https://user:password@mirror/...``).

The roles never write such a URL where a user of the node can read it, nor pass it on a
command line: :func:`split` gives the URL without its credentials and the user name and
password apart (percent-decoded), which dnf repositories take as their ``username=`` and
``password=`` options (the repository file mode 0600; librepo then logs the bare URL),
downloads as ``url_username``/``url_password`` and pip and conda through their
configuration files, readable by root and the env's group only (docs/security.md,
"Credentials").

:func:`problems` is the input check (``gpufleet.inputs.rules.check_url``): a credential with
a control character (a newline would start a new line of the repository file) or a square
bracket (unencoded, it makes the URL unreadable: percent-encode it), a password without a
user name, and, where the site asked for it (``gpufleet_credentials_https_only``),
credentials over plain HTTP. No message shows the credentials.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

_AUTHORITY = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<auth>[^/?#]*)(?P<rest>.*)$", re.S
)
_BAD = re.compile(r"[\x00-\x1f\x7f\[\]]")


@dataclass(frozen=True)
class UrlCredentials:
    url: str  # the URL without user:password@
    username: str  # percent-decoded; "" = none
    password: str  # percent-decoded; "" = none

    @property
    def present(self) -> bool:
        return bool(self.username or self.password)

    def as_dict(self) -> dict[str, str | bool]:
        return {
            "url": self.url,
            "username": self.username,
            "password": self.password,
            "present": self.present,
        }


def _userinfo(url: str) -> tuple[str, str, str, str] | None:
    """(scheme, userinfo, host part, rest) of a URL with ``userinfo@``; None without."""
    m = _AUTHORITY.match(url)
    if not m or "@" not in m.group("auth"):
        return None
    userinfo, _, host = m.group("auth").rpartition("@")
    return m.group("scheme"), userinfo, host, m.group("rest")


def split(url: str) -> UrlCredentials:
    """``url`` without its credentials, and the user name and password (decoded)."""
    text = str(url or "").strip()
    parts = _userinfo(text)
    if parts is None:
        return UrlCredentials(text, "", "")
    scheme, userinfo, host, rest = parts
    user, _, password = userinfo.partition(":")
    return UrlCredentials(f"{scheme}://{host}{rest}", unquote(user), unquote(password))


def problems(url: str, https_only: bool = False) -> list[str]:
    """What the credentials of ``url`` must be and are not, each as the refusal's "allowed"
    (never the credentials themselves); [] for a URL without credentials or good ones."""
    text = str(url or "").strip()
    parts = _userinfo(text)
    if parts is None:
        return []
    scheme, userinfo, _, _ = parts
    user, sep, _password = userinfo.partition(":")
    out = []
    if _BAD.search(userinfo) or _BAD.search(unquote(userinfo)):
        out.append(
            "credentials without control characters (a newline, a tab) or square brackets "
            "(percent-encode them: %5B, %5D)"
        )
    if "@" in userinfo:
        out.append("an @ in the credentials percent-encoded (%40)")
    if sep and not user:
        out.append("a user name with the password (user:password@)")
    if https_only and scheme.lower() == "http":
        out.append(
            "https:// for a URL with credentials (gpufleet_credentials_https_only is true; "
            "set it false to send them over plain HTTP)"
        )
    return out


__all__ = ["UrlCredentials", "problems", "split"]
