"""Atomic replacement of a checkpoint: temporaries named for their target and writer,
strays of killed writers removed, operating-system failures as ``CheckpointError``.

A checkpoint is written under a temporary name in the target's folder and renamed over
the target when complete, so a reader sees the old checkpoint or the new one, never a
partial one. The temporary's name says whose it is::

    .<target name>.tmp-<host>-<pid>-<random>

(``host``: 8 hex digits of a hash of the host name). A process killed mid-save (SIGKILL,
out of memory, a lost node) cannot remove its temporary; the next save to the same
target removes every temporary of that target whose writer is gone: on this host, a
process id that no longer runs (or is a zombie); on another host sharing the folder, one
not modified for an hour (a live writer keeps writing to it). Files of other targets and
any file not named this way are never touched.
"""

import contextlib
import errno
import os
import re
import secrets
import socket
import time
from collections.abc import Callable

import xxhash

from ._errors import CheckpointError

STALE_SECONDS = 3600.0  # another host's temporary untouched this long has no live writer
_HOST = f"{xxhash.xxh3_64_intdigest(socket.gethostname().encode()) & 0xFFFFFFFF:08x}"


def temporary(path: str) -> str:
    """A fresh temporary name for ``path``, in its folder (64 random bits)."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.tmp-{_HOST}-{os.getpid()}-{secrets.token_hex(8)}")


def _pattern(name: str) -> re.Pattern[str]:
    # this version's names, and the landed one's (.<name>.<16 hex>.tmp), which had no owner
    return re.compile(
        re.escape(f".{name}.")
        + r"(?:tmp-(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)-[0-9a-f]{16}|[0-9a-f]{16}\.tmp)"
    )


def host() -> str:
    """This host's 8-hex-digit tag in temporary names."""
    return _HOST


def running(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, killed but not yet reaped by
    its parent, does not)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return True
    with contextlib.suppress(OSError, IndexError):
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
        return state not in (b"Z", b"X")
    return True


def remove_strays(path: str) -> list[str]:
    """Remove the temporaries of ``path`` left by writers that are gone; return them."""
    folder, name = os.path.split(os.path.abspath(path))
    pattern = _pattern(name)
    removed: list[str] = []
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None:
            continue
        host, pid = match.group("host"), match.group("pid")
        if host == _HOST and pid is not None:
            stale = not running(int(pid))
        else:
            try:
                stale = now - entry.stat(follow_symlinks=False).st_mtime > STALE_SECONDS
            except OSError:
                continue
        if stale:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                if entry.is_dir(follow_symlinks=False):
                    _remove_tree(entry.path)
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
    return removed


def _remove_tree(folder: str) -> None:
    for root, dirs, files in os.walk(folder, topdown=False):
        for f in files:
            os.unlink(os.path.join(root, f))
        for d in dirs:
            os.rmdir(os.path.join(root, d))
    os.rmdir(folder)


def check_folder(path: str) -> None:
    """Raise ``CheckpointError`` naming ``path`` when its folder does not exist."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise CheckpointError(
            f"Cannot save {path!r}: the folder {folder!r} {what}. Create it first "
            "(os.makedirs(folder, exist_ok=True)); nothing was written."
        )


_FULL = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)


def failure(path: str, e: OSError) -> CheckpointError:
    """The ``CheckpointError`` for an operating-system failure while saving ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    why = f"{type(e).__name__}: {e.strerror or e}"
    if e.errno in _FULL:
        problem = (
            f"the disk (or the file-size limit or quota) is full ({why}). Free space or "
            "save elsewhere"
        )
    elif e.errno in _DENIED:
        problem = (
            f"the folder {folder!r} cannot be written ({why}). Save to a writable folder, "
            "or change its permissions"
        )
    elif e.errno == errno.ENOENT:
        problem = f"the folder {folder!r} does not exist ({why}). Create it first"
    elif e.errno == errno.EISDIR or os.path.isdir(path):
        problem = f"a folder of that name is in the way ({why}). Remove it or pick another name"
    else:
        problem = f"the operating system refused ({why})"
    return CheckpointError(
        f"Cannot save {path!r}: {problem}. Nothing partial was left; an earlier checkpoint "
        "at that path is intact."
    )


def replace(path: str, write: Callable[[str], None], *, sync: bool) -> None:
    """Write ``path`` atomically: ``write(temporary)``, then rename it over ``path``.

    Strays of ``path`` from killed writers are removed first. A failure removes the
    temporary and leaves ``path`` as it was; an ``OSError`` becomes a ``CheckpointError``
    naming ``path``. ``sync`` makes the result durable (``fsync`` of the file before the
    rename, of the folder after it).
    """
    check_folder(path)
    remove_strays(path)
    tmp = temporary(path)
    try:
        write(tmp)
        if sync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise failure(path, e) from e
        raise
    if sync:
        sync_folder(os.path.dirname(os.path.abspath(path)))


def sync_folder(folder: str) -> None:
    """``fsync`` a folder, making renames in it durable, where the OS allows it."""
    with contextlib.suppress(OSError):
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
