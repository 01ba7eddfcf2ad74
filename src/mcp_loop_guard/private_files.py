"""Files only this user can write: the state directory, the state database, its live files, the event log.

A guard trusts what it reads there (a planted loop state refuses an agent's calls) and writes
through what it opens (a planted symbolic link turns its write into one to another file). So
every such path is checked before use: the file, and the directory holding it, must belong to
this user and be writable by no one else; a directory above them must belong to this user or
to root, and may be writable by others only when it is sticky (``/tmp``), where no one else
can rename or delete what is ours. A file is opened with ``O_NOFOLLOW`` and checked on the
open descriptor, so a swap between the check and the open is caught too. What is created is
created 0600 (files) and 0700 (directories).

Group-writable counts as writable by others, except for the user's own private group (named
as the user, with no other member), which some systems give every user with a umask of 002.
Where the platform has no owners (Windows), only the modes are set.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from pathlib import Path

__all__ = ["UnsafePathError", "check_private_file", "open_private", "private_directory"]

POSIX = hasattr(os, "geteuid")
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class UnsafePathError(OSError):
    """A path another user could write or redirect; the message names the path and the problem."""


def private_directory(path: Path, *, create: bool = True) -> None:
    """Make sure ``path`` is a directory only this user can write; create it (and missing parents) 0700.

    Raises:
        UnsafePathError: it, or a directory above it, could be written or swapped by another user.
        OSError: it cannot be created (a missing directory with ``create`` false: FileNotFoundError).
    """
    path = Path(os.path.abspath(path))
    if create:
        for directory in [*reversed(path.parents), path]:
            if not os.path.lexists(directory):
                with contextlib.suppress(FileExistsError):  # made meanwhile: checked below like any other
                    os.mkdir(directory, 0o700)
    if not POSIX:
        return
    _check_links(path)
    resolved = path.resolve()
    _check_ancestors(resolved)
    _refuse(resolved, os.stat(resolved), directory=True, final=True)


def open_private(path: Path, flags: int, *, shared_parent: bool = False) -> int:
    """Open a file only this user can write (created 0600 with ``O_CREAT``): the descriptor.

    Never follows a symbolic link, never blocks opening a FIFO, and refuses anything but a
    regular file of this user's that no one else may write. The directory holding it must be
    private too, unless ``shared_parent``: then it may be a sticky one others write as well
    (a file that has no companion files, such as the event log, is safe in ``/tmp``).

    Raises:
        UnsafePathError: the file or a directory above it could be written or swapped by another user.
        OSError: the file cannot be opened.
    """
    path = Path(os.path.abspath(path))
    if POSIX:
        _check_links(path.parent)
        parent = path.parent.resolve()
        _check_ancestors(parent)
        _refuse(parent, os.stat(parent), directory=True, final=not shared_parent)
    try:
        fd = os.open(path, flags | NOFOLLOW | CLOEXEC | NONBLOCK, 0o600)
    except OSError as error:
        if POSIX and _is_link(path):
            raise UnsafePathError(f"{path} is a symbolic link: give the file's own path") from error
        if POSIX and _is_special(path):
            raise UnsafePathError(f"{path} is not a regular file") from error
        raise
    try:
        if POSIX:
            _refuse(path, os.fstat(fd), directory=False, final=True)
        if NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_private_file(path: Path) -> None:
    """Refuse an existing file (a database's companion: its WAL, its shared memory) another user could write.

    Raises:
        UnsafePathError: it is a link, not a regular file, another user's, or writable by others.
    """
    if not POSIX:
        return
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    _refuse(Path(os.path.abspath(path)), found, directory=False, final=True)


def _refuse(path: Path, found: os.stat_result, *, directory: bool, final: bool) -> None:
    """Raise when ``found`` (the status of ``path``) is not ours to trust."""
    if stat.S_ISLNK(found.st_mode):
        raise UnsafePathError(f"{path} is a symbolic link: give the file's own path")
    if directory and not stat.S_ISDIR(found.st_mode):
        raise UnsafePathError(f"{path} is not a directory")
    if not directory and not stat.S_ISREG(found.st_mode):
        raise UnsafePathError(f"{path} is not a regular file")
    me = os.geteuid()
    if found.st_uid != me and (final or found.st_uid != 0):
        raise UnsafePathError(f"{path} belongs to another user (uid {found.st_uid}), not to this one (uid {me})")
    if _writable_by_others(found) and (final or not found.st_mode & stat.S_ISVTX):
        mode = stat.S_IMODE(found.st_mode)
        raise UnsafePathError(f"{path} is writable by other users (mode {mode:04o}): use a directory of your own")


def _check_ancestors(resolved: Path) -> None:
    """Every directory above ``resolved`` (a path without links): ours or root's, shared only if sticky."""
    for ancestor in reversed(resolved.parents):
        _refuse(ancestor, os.stat(ancestor), directory=True, final=False)


def _check_links(path: Path) -> None:
    """A symbolic link on the way to ``path`` must be ours or root's: another user's could be pointed elsewhere."""
    me = os.geteuid()
    for step in [*reversed(path.parents), path]:
        try:
            found = os.lstat(step)
        except OSError:
            return  # resolving the path reports it
        if stat.S_ISLNK(found.st_mode) and found.st_uid not in (me, 0):
            raise UnsafePathError(f"{step} is a symbolic link of another user (uid {found.st_uid})")


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_special(path: Path) -> bool:
    """A FIFO, socket or device, which opening could block on or write into."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _writable_by_others(found: os.stat_result) -> bool:
    if found.st_mode & stat.S_IWOTH:
        return True
    return bool(found.st_mode & stat.S_IWGRP) and not _private_group(found.st_gid)


@functools.cache
def _private_group(gid: int) -> bool:
    """The user's own group: their primary group, named as they are, with no other member."""
    try:
        import grp  # noqa: PLC0415 - POSIX only
        import pwd  # noqa: PLC0415 - POSIX only

        user = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == user.pw_gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}
