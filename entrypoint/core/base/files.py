"""The one way kimi-serve reads a file it is pointed at: bounded in time and in size.

`open()` on a FIFO waits for a writer for ever, and `read()` of a character device (/dev/zero,
/dev/urandom) or of /proc never ends; a file named by a variable (KIMI_CONFIG,
GOOGLE_APPLICATION_CREDENTIALS, the node's /proc and /sys files, hub refs) may be any of those.
Here the file is opened without blocking, must be a regular file (sysfs and procfs files are),
and at most `max_bytes + 1` bytes are read, so the caller can tell "too large".
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from typing import Optional

from entrypoint.core.base import limits


def read_capped(path, max_bytes: int) -> bytes:
    """Up to max_bytes + 1 bytes of the regular file at `path`; OSError (EINVAL, "not a regular
    file") for a FIFO, a device, a socket or a directory, and for anything open() refuses."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"{kind_of(mode)}, not a regular file", os.fsdecode(path))
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


class DataFileError(ValueError):
    """A data file kimi-serve reads cannot be used; str() is one line that names the file."""


def _yaml_loader():
    import yaml  # noqa: PLC0415 - a third party only this path needs

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader where libyaml is there


def _check_yaml_shape(data: bytes, where: str, max_depth: int, max_nodes: int):
    """The YAML's node graph, after two bounds: nesting depth (read from the event stream, which
    the parser produces without recursion), and the node count with every alias expanded
    (counted on the graph, where an alias is one shared node: "billion laughs" is refused before
    anything walks the expansion). A recursive alias is refused too."""
    import yaml  # noqa: PLC0415 - a third party only this path needs

    loader_cls = _yaml_loader()
    depth = 0
    for event in yaml.parse(data, Loader=loader_cls):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > max_depth:
                raise DataFileError(f"{where}: nests deeper than {max_depth} levels")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
    loader = loader_cls(data)
    try:
        node = loader.get_single_node()
        sizes: dict = {}

        def size(n) -> int:  # iterative post-order: no Python recursion on any input
            stack = [(n, False)]
            while stack:
                cur, done = stack.pop()
                key = id(cur)
                if key in sizes and sizes[key] is not None:
                    continue
                children = ([c for pair in cur.value for c in pair] if isinstance(cur, yaml.MappingNode)
                            else list(cur.value) if isinstance(cur, yaml.SequenceNode) else [])
                if done:
                    total = 1 + sum(sizes[id(c)] for c in children)
                    if total > max_nodes:
                        raise DataFileError(f"{where}: more than {max_nodes} values once its aliases are "
                                            "expanded (YAML anchors and aliases are bounded)")
                    sizes[key] = total
                    continue
                if key in sizes:  # entered, not finished: the alias points into itself
                    raise DataFileError(f"{where}: a YAML alias refers to the value that contains it")
                sizes[key] = None
                stack.append((cur, True))
                stack.extend((c, False) for c in children)
            return sizes[id(n)]

        if node is not None:
            size(node)
        return loader, node
    except BaseException:
        loader.dispose()
        raise


def parse_yaml(data: bytes, where: str, max_depth: int, max_nodes: int):
    """YAML text as Python data (the safe loader), bounded in depth and in expanded size; a
    DataFileError (one line, naming `where`) for anything that is not well-formed or too big."""
    import yaml  # noqa: PLC0415 - a third party only this path needs

    try:
        loader, node = _check_yaml_shape(data, where, max_depth, max_nodes)
        try:
            return None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DataFileError(f"{where}: not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise DataFileError(f"{where}: nests too deep to read") from None


def parse_json(data: bytes, where: str):
    """JSON as Python data; a DataFileError (one line, naming `where`) otherwise."""
    try:
        return json.loads(data)
    except RecursionError:
        raise DataFileError(f"{where}: nests too deep to read") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise DataFileError(f"{where}: not valid JSON: {str(exc).splitlines()[0]}") from None


def read_data(path, max_bytes: int, max_depth: int, max_nodes: int):
    """One data file (YAML, or JSON for *.json) read the one way: a regular file (a FIFO, a
    device or a directory is refused, not waited on), at most `max_bytes`, bounded in depth and
    in size; DataFileError with one line naming the file otherwise."""
    where = os.fsdecode(path)
    try:
        data = read_capped(path, max_bytes)
    except OSError as exc:
        raise DataFileError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise DataFileError(f"{where}: larger than {max_bytes} bytes")
    if where.endswith(".json"):
        return parse_json(data, where)
    return parse_yaml(data, where, max_depth, max_nodes)


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, for a message."""
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "not a regular file")


class Walk:
    """What a bounded search of a directory tree found: the regular files matching (path, size),
    the matching names that are not regular files (path, what they are: a FIFO, a device, a link
    loop...), and why the search stopped early ("" when it saw everything)."""

    def __init__(self):
        self.files: list = []
        self.odd: list = []
        self.stopped = ""

    def problem(self) -> str:
        """The first matching name that cannot be read as a file, for a message ("" if none)."""
        if not self.odd:
            return ""
        path, what = self.odd[0]
        more = f" (and {len(self.odd) - 1} more)" if len(self.odd) > 1 else ""
        return f"{path} is {what}, not a regular file{more}"


def walk_files(root, suffix: str, max_entries: int, max_depth: int, deadline_s: float,
               first: int = 0) -> Walk:
    """The files under `root` whose names end in `suffix`, found without following links to
    directories (a link loop cannot hold it), at most `max_depth` levels down, `max_entries`
    directory entries looked at and `deadline_s` seconds (a slow network volume); with `first`,
    it stops once that many regular files are found. A file link is followed (the Hugging Face
    cache's snapshots link to its blobs) and must end at a regular file."""
    found = Walk()
    end = time.monotonic() + deadline_s
    seen = 0
    pending = [(os.fspath(root), 0)]
    while pending:
        directory, depth = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    seen += 1
                    if seen > max_entries:
                        found.stopped = f"more than {max_entries} entries under {os.fsdecode(root)}"
                        return found
                    if time.monotonic() > end:
                        found.stopped = f"the search of {os.fsdecode(root)} passed {deadline_s:g} s"
                        return found
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    if is_dir:
                        if depth + 1 <= max_depth:
                            pending.append((entry.path, depth + 1))
                        continue
                    if not entry.name.endswith(suffix):
                        continue
                    try:
                        info = os.stat(entry.path)
                    except OSError as exc:
                        what = "a link loop" if exc.errno == errno.ELOOP else \
                            f"unreadable ({exc.strerror or exc})" if exc.errno != errno.ENOENT else "a dangling link"
                        found.odd.append((entry.path, what))
                        continue
                    if stat.S_ISREG(info.st_mode):
                        found.files.append((entry.path, info.st_size))
                        if first and len(found.files) >= first:
                            return found
                    else:
                        found.odd.append((entry.path, kind_of(info.st_mode)))
        except OSError:
            continue  # unreadable: the caller's access check says so
    return found


def open_regular(path, flags: int = 0) -> int:
    """A descriptor of the regular file at `path`, opened without blocking (a FIFO would wait
    for a writer for ever); OSError (EINVAL) for anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"{kind_of(mode)}, not a regular file", os.fsdecode(path))
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_file(path, data, mode: int = 0o644) -> None:
    """The one way kimi-serve writes a file: a new file beside `path` (created exclusively, never
    through a link), written whole, then renamed over `path`. A link planted at `path` is
    replaced, never followed, so nothing is written outside the directory asked for; a reader
    never sees half a file. `data` is text (UTF-8) or bytes."""
    import tempfile  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=folder)  # O_EXCL|O_NOFOLLOW
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def is_local_path(model: str) -> bool:
    """Whether KIMI_MODEL names a path of this node (`/models/x`, `./x`, `~/x`), not a repo id or a URL."""
    return "://" not in model and model.startswith(("/", "./", "../", "~"))


def local_model_problem(model: str) -> Optional[str]:
    """Why the local path `model` holds no weights vLLM could load (words that follow the path), or
    None: a path that exists and holds *.safetensors or *.bin, or no local path at all."""
    if not is_local_path(model):
        return None
    path = os.path.expanduser(model)
    try:
        info = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a link loop"
        return "is a dangling link" if os.path.islink(path) else "does not exist on this node"
    if not stat.S_ISDIR(info.st_mode):
        return f"is {kind_of(info.st_mode) if not stat.S_ISREG(info.st_mode) else 'a file'}, not a directory of weights"
    odd = []
    for suffix in (".safetensors", ".bin"):
        walk = walk_files(path, suffix, limits.MAX_WEIGHTS_ENTRIES, 0, limits.WEIGHTS_SEARCH_DEADLINE_S)
        if walk.files:
            return None
        odd += walk.odd
    if odd:
        name, what = odd[0]
        return f"holds no weights vLLM could read: {os.path.basename(name)} is {what}, not a regular file"
    return "holds no weights (no *.safetensors or *.bin file in it)"


def local_model_gb(model: str) -> Optional[float]:
    """GB of weights (*.safetensors, else *.bin) in a local model directory (KIMI_MODEL=/path), the
    top folder as vLLM reads it; None when `model` is no local directory holding either (a repo id,
    a URL): the recipe's variant sizes it then."""
    if "://" in model or not os.path.isdir(model):
        return None
    for suffix in (".safetensors", ".bin"):
        walk = walk_files(model, suffix, limits.MAX_WEIGHTS_ENTRIES, 0, limits.WEIGHTS_SEARCH_DEADLINE_S)
        if walk.files:
            return sum(size for _, size in walk.files) / 1e9
    return None
