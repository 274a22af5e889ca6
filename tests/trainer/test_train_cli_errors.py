"""`rollwire train` turns bad input into one readable stderr line and a non-zero exit, before any training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollwire.app.cli.__main__ import main


def test_unknown_run_and_bad_model_are_one_line(
    fake_proxy: Any, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = fake_proxy
    base = ["train", "--admin-url", url, "--operator-key", "op-key", "--output-dir", str(tmp_path / "out")]
    assert main([*base, "--run", "missing", "--model", str(tiny_model_dir)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "rollwire train: the proxy knows no run 'missing' (or this is not its admin listener)"

    assert main([*base, "--run", "run", "--model", str(tmp_path)]) == 1
    assert "is not a Hugging Face model folder" in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "out" / "latest").exists()

    with pytest.raises(SystemExit) as usage:
        main([*base, "--algo", "ppo"])
    assert usage.value.code == 2
