"""The one way kimi-serve reads a file it is pointed at: bounded in time and in size.

`open()` on a FIFO waits for a writer for ever, and `read()` of a character device (/dev/zero,
/dev/urandom) or of /proc never ends; a file named by a variable (KIMI_CONFIG,
GOOGLE_APPLICATION_CREDENTIALS, the node's /proc and /sys files, hub refs) may be any of those.
Here the file is opened without blocking, must be a regular file (sysfs and procfs files are),
and at most `max_bytes + 1` bytes are read, so the caller can tell "too large".
"""

from __future__ import annotations

import errno
import os
import stat


def read_capped(path, max_bytes: int) -> bytes:
    """Up to max_bytes + 1 bytes of the regular file at `path`; OSError (EINVAL, "not a regular
    file") for a FIFO, a device, a socket or a directory, and for anything open() refuses."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
                    if stat.S_ISSOCK(mode) else "not a regular file")
            raise OSError(errno.EINVAL, f"{kind}, not a regular file", os.fsdecode(path))
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text_capped(path, max_bytes: int) -> str:
    """The file as text (undecodable bytes replaced), or OSError; longer than max_bytes: OSError (EFBIG)."""
    data = read_capped(path, max_bytes)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes", os.fsdecode(path))
    return data.decode("utf-8", "replace")
