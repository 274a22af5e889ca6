"""``rollwire proxy`` refuses bad flags with one readable line and exit code, before serving anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollwire.app.cli.__main__ import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "/no/such/folder"], "does not exist"),
        (["--upstream", "localhost:8100"], "http(s) URL"),
        (["--tool-parser", "nope"], "unknown tool parser"),
    ],
)
def test_bad_flags_are_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["proxy", "--db", f"sqlite:///{tmp_path / 's.db'}", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
