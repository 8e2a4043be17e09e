"""A container's stop, begun before its SIGTERM (docs/day2.md): `kimi-serve drain` (the preStop hook)
marks the container as stopping, and from then on its readiness probe (`kimi-serve healthcheck
--ready`) fails, so the endpoints, the fleet router's membership and gateways take it out of
rotation while vLLM, still healthy, keeps serving the requests it holds; the kubelet's SIGTERM after
the hook starts vLLM's drain. The mark is a file in the container's scratch /tmp (an emptyDir under a
read-only root), gone with the pod; a container restarted in its pod (a liveness failure runs the
preStop hook too) finds it there, so the entrypoint clears it before it execs (`clear`)."""

from __future__ import annotations

import os
from typing import Mapping

MARK = "kimi-serve-stopping"


def mark_path(environ: Mapping[str, str]) -> str:
    return os.path.join(environ.get("TMPDIR") or "/tmp", MARK)


def begin(environ: Mapping[str, str]) -> str:
    """Mark this container as stopping; the mark's path."""
    path = mark_path(environ)
    with open(path, "w", encoding="utf-8") as f:
        f.write("stopping\n")
    return path


def begun(environ: Mapping[str, str]) -> bool:
    return os.path.exists(mark_path(environ))


def clear(environ: Mapping[str, str]) -> None:
    """This container is starting: it is not stopping, whatever an earlier run of it left in /tmp."""
    try:
        os.unlink(mark_path(environ))
    except FileNotFoundError:
        pass
