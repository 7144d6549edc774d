"""gpufleet.units: byte sizes, booleans and systemd time spans as users write them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpufleet import units
from gpufleet.errors import RefusedError


@pytest.mark.parametrize("word", ["1", "true", "TRUE", " Yes ", "on", "Y"])
def test_true_spellings(word: str) -> None:
    assert units.parse_bool(word, "X") is True


@pytest.mark.parametrize("word", ["0", "false", "FALSE", "No", "off", "n"])
def test_false_spellings(word: str) -> None:
    assert units.parse_bool(word, "X") is False


@pytest.mark.parametrize("word", ["ture", "2", "enabled", "", "yes please"])
def test_other_spellings_are_refused_naming_the_variable(word: str) -> None:
    with pytest.raises(RefusedError, match=r"REQUIRE_GPU=.* is refused -> allowed: 1, true"):
        units.parse_bool(word, "REQUIRE_GPU")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.units", *args], capture_output=True, text=True, check=False
    )


def test_make_helper_prints_one_zero_or_nothing_and_refuses_typos() -> None:
    assert (_cli("bool", "FULL", "TRUE").stdout, _cli("bool", "FULL", "off").stdout) == (
        "1\n",
        "0\n",
    )
    empty = _cli("bool", "FULL", "  ")
    assert (empty.returncode, empty.stdout) == (0, "")
    typo = _cli("bool", "FULL", "ture")
    assert typo.returncode == 2 and typo.stdout == ""
    assert "ERROR: FULL='ture' is refused" in typo.stderr
    assert _cli("bool", "FULL").returncode == 2


@pytest.mark.parametrize(
    ("text", "size", "human"), [("4096", 4096, "4K"), ("64K", 65536, "64K"), ("1g", 1024**3, "1G")]
)
def test_sizes(text: str, size: int, human: str) -> None:
    assert units.parse_size(text) == size
    assert units.human_size(size) == human


@pytest.mark.parametrize(
    ("span", "seconds"),
    [("300", 300), (300, 300), ("90s", 90), ("5min", 300), ("5 min", 300), ("1h 30min", 5400),
     ("1.5h", 5400), ("2d", 172800), ("1w", 604800), ("250ms", 0.25), ("0", 0)],
)  # fmt: skip
def test_systemd_time_spans(span: object, seconds: float) -> None:
    assert units.parse_timespan(span) == pytest.approx(seconds)


@pytest.mark.parametrize("span", ["", "soon", "5 mins", "1M", "-5s", "5min;", "5m x", True, None])
def test_what_systemd_would_not_take_is_refused(span: object) -> None:
    """Months and years (uneven lengths) and units systemd does not know ("mins") too."""
    with pytest.raises(ValueError, match="systemd time span"):
        units.parse_timespan(span)


@pytest.mark.parametrize(
    ("text", "seconds"), [("2m", 120), ("30m", 1800), ("45", 45), (" 1h ", 3600)]
)
def test_durations(text: str, seconds: int) -> None:
    assert units.parse_duration(text, "DURATION") == seconds


@pytest.mark.parametrize("text", ["2x", "0", "-1m", "8d", "1.5h", ""])
def test_other_durations_are_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(
        RefusedError, match=f"DURATION={text!r} is refused -> allowed: a whole number of seconds"
    ):
        units.parse_duration(text, "DURATION")
