"""What every command shares: building the launch from this process's environment, and turning
user errors into one message and exit code 2."""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from typing import Mapping, NoReturn, Optional

from entrypoint.errors import EXIT_USAGE, KimiError

EXIT_BROKEN_IMAGE = 3


def fail(err: KimiError) -> NoReturn:
    print(f"kimi-serve: error: {err.message}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


def guarded(fn):
    """Run a command body; a KimiError ends it with its message and exit code 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from entrypoint.recipe import RecipeDataError

        try:
            return fn(*args, **kwargs)
        except KimiError as err:
            fail(err)
        except RecipeDataError as err:
            print(f"kimi-serve: error: {err} (a defect of this image: please report it)", file=sys.stderr)
            sys.exit(EXIT_BROKEN_IMAGE)

    return wrapper


def detected_hardware(environ: Mapping[str, str]) -> Optional[str]:
    """The hardware id the node detection found, or None. Only asked when KIMI_HARDWARE=auto."""
    from entrypoint.detect import detect_hardware_id

    return detect_hardware_id(environ)


def load_launch(user_args: tuple = (), environ: Optional[Mapping[str, str]] = None, wiring=None):
    """The launch from the environment after cluster wiring (LWS / Slurm / KIMI_IFACE=auto); pass
    `wiring` when the caller has wired the environment already (it also logs the decisions)."""
    from entrypoint.app import build
    from entrypoint.cluster import wire

    if wiring is None:
        wiring = wire(os.environ if environ is None else environ)
    environ = wiring.environ
    detected = None
    if environ.get("KIMI_HARDWARE", "").strip().lower() == "auto":
        detected = detected_hardware(environ)
    return build(environ, tuple(user_args), detected_hardware=detected)


@dataclass(frozen=True)
class ServiceExpectations:
    url: str
    served_model_name: str
    features: frozenset


def service_expectations(environ: Optional[Mapping[str, str]] = None) -> ServiceExpectations:
    """What a client of this configuration should find: URL, served model name, features."""
    launch = load_launch((), environ)
    proc = launch.this_process() if launch.selection.role or launch.selection.prefill is None else \
        launch.plan.find("router", 0)
    port = proc.port or 8000
    host = launch.settings.host or "127.0.0.1"
    if proc.role == "router":
        host = launch.settings.router_host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return ServiceExpectations(url=f"http://{host}:{port}", served_model_name=launch.plan.served_model_name,
                               features=frozenset(launch.plan.features))
