"""``disk_used``: what a rollout's folder holds on disk, measured as the platform must (the rollout chose it all)."""

from __future__ import annotations

import os
from pathlib import Path

from rollwire.rollout_files import disk_used

MIB = 1 << 20


def _fill(path: Path, mib: int) -> None:
    path.write_bytes(os.urandom(mib * MIB))


def test_counts_files_and_folders_below(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    _fill(tmp_path / "a" / "b" / "data", 2)
    _fill(tmp_path / "top", 1)
    used = disk_used(tmp_path, 64 * MIB)
    assert 3 * MIB <= used < 4 * MIB, used


def test_a_link_counts_itself_not_its_target(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    _fill(outside / "big", 8)
    folder = tmp_path / "rollout"
    folder.mkdir()
    (folder / "to-file").symlink_to(outside / "big")
    (folder / "to-folder").symlink_to(outside)
    assert disk_used(folder, 64 * MIB) < MIB


def test_a_sparse_file_counts_its_blocks(tmp_path: Path) -> None:
    with open(tmp_path / "sparse", "wb") as handle:
        handle.seek(1 << 30)
        handle.write(b"x")
    assert disk_used(tmp_path, 64 * MIB) < MIB


def test_stops_past_the_limit(tmp_path: Path) -> None:
    for index in range(4):
        _fill(tmp_path / f"f{index}", 1)
    used = disk_used(tmp_path, MIB // 2)
    assert MIB // 2 < used < 4 * MIB, used  # past the limit after the first file, not the whole walk


def test_a_flood_of_empty_names_is_past_any_limit(tmp_path: Path) -> None:
    for index in range(50):
        (tmp_path / f"empty-{index}").touch()
    assert disk_used(tmp_path, 1 << 40, max_entries=20) > 1 << 40


def test_a_folder_made_unreadable_still_counts(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    _fill(hidden / "data", 2)
    hidden.chmod(0)
    try:
        assert disk_used(tmp_path, 64 * MIB) >= 2 * MIB
    finally:
        hidden.chmod(0o700)


def test_a_missing_folder_holds_nothing(tmp_path: Path) -> None:
    assert disk_used(tmp_path / "gone", MIB) == 0
