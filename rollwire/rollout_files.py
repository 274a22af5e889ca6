"""Reading a file a rollout wrote, as the platform must: the rollout is an adversary and chose what is there.

A final answer or a checked file sits in a folder the rollout could write. Read with a plain ``open()``, a
symlink there reads any file of the host (the stack's operator key, a home folder's secrets), a FIFO blocks the
reading thread forever, a device may block or never end, and a huge file fills memory. ``read_beneath``:

- walks ``relative`` from ``root`` one component at a time with ``O_NOFOLLOW`` (no component may be a symlink,
  none may be ``..`` or absolute), opening with ``O_PATH`` so nothing is read or triggered by the open;
- accepts only a regular file with one link (a hard link could name a file the rollout could not write);
- reads it through its own descriptor with ``O_NONBLOCK``, at most ``max_bytes`` (one byte more tells oversize).

A file that is not there is ``None`` (no answer, not an attack); anything refused raises ``RefusedFile`` with
one line that says why, which callers record as the rollout's own (policy) failure.

``disk_used`` measures a rollout's folder the same way: it never follows a link, and stops counting once past
the limit it is asked about (a rollout that makes a million files costs one bounded walk, not one per file).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


class RefusedFile(Exception):
    """A rollout-controlled file the platform will not read; ``reason`` is one line (recorded on the rollout)."""

    def __init__(self, relative: str, reason: str) -> None:
        super().__init__(f"{relative[:200]!r} {reason}")
        self.reason = f"{relative[:200]!r} {reason}"


def _parts(relative: str) -> tuple[str, ...]:
    path = PurePosixPath(relative)
    if path.is_absolute() or not path.parts or ".." in path.parts:
        raise RefusedFile(relative, "is not a plain path inside the rollout's folder")
    return path.parts


def _open_path(name: str, dir_fd: int, relative: str, *, directory: bool) -> int:
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and directory:
            raise RefusedFile(relative, "goes through a symbolic link or a non-folder") from None
        raise


def read_beneath(root: Path, relative: str, max_bytes: int) -> bytes | None:
    """The bytes of ``root/relative`` (a regular file, no symlink on the way, at most ``max_bytes``); None when
    it is not there; ``RefusedFile`` for anything else. ``root`` is the platform's own folder, not followed."""
    parts = _parts(relative)
    try:
        current = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        for name in parts[:-1]:
            following = _open_path(name, current, relative, directory=True)
            os.close(current)
            current = following
        found = _open_path(parts[-1], current, relative, directory=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(current)
    try:
        return _read_regular(found, relative, max_bytes)
    finally:
        os.close(found)


def _read_regular(path_fd: int, relative: str, max_bytes: int) -> bytes:
    info = os.fstat(path_fd)
    kind = stat.S_IFMT(info.st_mode)
    if kind != stat.S_IFREG:
        raise RefusedFile(relative, f"is {_KINDS.get(kind, 'not a regular file')}")
    if info.st_nlink != 1:
        raise RefusedFile(relative, f"has {info.st_nlink} hard links")
    if info.st_size > max_bytes:
        raise RefusedFile(relative, f"is larger than {max_bytes} bytes")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd = os.open(f"/proc/self/fd/{path_fd}", flags)  # the very inode found above, never a name looked up again
    try:
        again = os.fstat(fd)
        if (again.st_dev, again.st_ino) != (info.st_dev, info.st_ino) or not stat.S_ISREG(again.st_mode):
            raise RefusedFile(relative, "changed while it was opened")
        chunks, left = [], max_bytes + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise RefusedFile(relative, f"is larger than {max_bytes} bytes")
    return data


def disk_used(root: Path, limit_bytes: int, max_entries: int = 1_000_000) -> int:
    """Bytes the files under ``root`` hold on disk (allocated blocks: a sparse file counts what it uses), counted
    without following links; the walk stops once past ``limit_bytes``. Every entry counts a block at least,
    so ``max_entries`` names (an inode flood of empty files) are past any limit too. A folder the rollout made
    unreadable is made readable again first (its files count like any others)."""
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    used, entries, folders = 0, 0, [top]
    try:
        while folders and used <= limit_bytes and entries <= max_entries:
            folder = folders.pop()
            try:
                with os.scandir(folder) as listing:
                    for entry in listing:
                        entries += 1
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        used += max(info.st_blocks * 512, 512)
                        if used > limit_bytes or entries > max_entries:
                            break
                        if stat.S_ISDIR(info.st_mode) and (inner := _open_folder(entry.name, folder)) is not None:
                            folders.append(inner)
            finally:
                os.close(folder)
    finally:
        for folder in folders:
            os.close(folder)
    return used if used <= limit_bytes and entries <= max_entries else max(used, limit_bytes + 1)


def _open_folder(name: str, parent: int) -> int | None:
    """A descriptor to list the folder ``name`` in ``parent`` (never through a link), or None once it is gone."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=parent)
    except PermissionError:  # the rollout took its own permission away; the inode itself is made listable again
        pinned = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        try:
            os.chmod(f"/proc/self/fd/{pinned}", 0o700)
            return os.open(f"/proc/self/fd/{pinned}", flags)
        finally:
            os.close(pinned)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None  # gone, or replaced by a file or a link since it was listed
        raise


__all__ = ["RefusedFile", "disk_used", "read_beneath"]
