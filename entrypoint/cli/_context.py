"""The one guard around every command and the start: whatever goes wrong ends in one line with
the cause and a way out, a documented exit code, and no secret; never a traceback (unless
KIMI_DEBUG=1 asks for one). docs/reliability.md lists the exit codes."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback
from typing import NoReturn, Optional

from entrypoint.core.base.errors import EXIT_USAGE, INTERNAL_ERROR, KimiError

EXIT_BROKEN_IMAGE = 3  # a defect of the image: broken recipe data, or a bug (please report it)
EXIT_INTERRUPTED = 130
ARGV: list = []  # this run's arguments (main sets them): secrets given there are masked too
# Where Kubernetes reads a container's termination message (terminationMessagePath's default): the
# start writes its one-line refusal there too, so `kubectl get pods` / `describe` show it
TERMINATION_LOG = "/dev/termination-log"
REPORT_HINT = "a bug in kimi-serve: please report it with this line (KIMI_DEBUG=1 shows the full trace)"


def _debug() -> bool:
    """KIMI_DEBUG, read with the settings' one yes/no parser (never failing: this is the guard)."""
    from entrypoint.core.compose.settings import BY_NAME, env_flag

    return env_flag(os.environ, BY_NAME["debug"].env)


def say(message: str, level: str = "error", json_log: bool = False, code: str = "") -> None:
    """One line on stderr, secrets masked: `kimi-serve: error: ...`, or a JSON record."""
    from entrypoint.core.vllm.mask import mask_output

    message = mask_output(message, os.environ, ARGV)
    if json_log:
        record = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": level, "event": level,
                  "message": message}
        if code:
            record["code"] = code
        print(json.dumps(record), file=sys.stderr, flush=True)
    else:
        print(f"kimi-serve: {level}: {message}", file=sys.stderr, flush=True)


def echo(text: str, err: bool = False) -> None:
    """What a command prints on stdout (or stderr), through the one masking of secrets."""
    import click

    from entrypoint.core.vllm.mask import mask_output

    click.echo(mask_output(text, os.environ, ARGV), err=err)


def _os_message(err: OSError) -> str:
    where = " -> ".join(str(f) for f in (err.filename, err.filename2) if f is not None)
    return (f"{where + ': ' if where else ''}{err.strerror or err}. Check that the path exists and that this user "
            f"(uid {os.getuid()}) may use it.")


def write_termination_message(message: str, path: str = TERMINATION_LOG) -> None:
    """The refusal, masked, into the termination log where the runtime made one (a regular file:
    Kubernetes'); nothing elsewhere, and never an error of its own."""
    import stat

    from entrypoint.core.vllm.mask import mask_output

    try:
        if not stat.S_ISREG(os.stat(path, follow_symlinks=False).st_mode):
            return
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(mask_output(message, os.environ, ARGV)[:4096] + "\n")  # Kubernetes keeps 4096 bytes
    except OSError:
        pass


def run_guarded(fn, *args, error_exit: Optional[int] = None, json_log: bool = False, termination_log: str = "", **kwargs):
    """Call fn; map every failure to one line and an exit code. `error_exit` replaces every
    failing code (healthcheck: 1, Docker's HEALTHCHECK contract); `termination_log`: the file the
    line goes to as well (the container's start)."""
    from entrypoint.core.data.recipe import RecipeDataError

    def end(message: str, code: int, kind: str = "") -> NoReturn:
        say(message, json_log=json_log, code=kind)
        if termination_log:
            write_termination_message(message, termination_log)
        sys.exit(error_exit if error_exit is not None else code)

    try:
        return fn(*args, **kwargs)
    except KimiError as err:
        end(err.message, err.exit_code, err.code)
    except RecipeDataError as err:
        end(f"{err} (a defect of this image: please report it)", EXIT_BROKEN_IMAGE, "broken_image")
    except KeyboardInterrupt:
        end("interrupted", EXIT_INTERRUPTED)
    except OSError as err:  # a file, the node or the network refused: the user's to fix
        if _debug():
            traceback.print_exc(limit=1000)  # explicit: a library may have set sys.tracebacklimit
        end(_os_message(err), EXIT_USAGE, "os_error")
    except (RecursionError, MemoryError) as err:
        end(f"the input is too deep or too large to read ({type(err).__name__}); docs/reliability.md lists the "
            "bounds", EXIT_USAGE, "too_large")
    except Exception as err:  # noqa: BLE001 - the last line of defence: still one line
        if _debug():
            traceback.print_exc(limit=1000)  # explicit: a library may have set sys.tracebacklimit
        text = str(err).splitlines()[0][:200] if str(err) else ""
        end(f"{type(err).__name__}{': ' + text if text else ''} ({REPORT_HINT})", EXIT_BROKEN_IMAGE, INTERNAL_ERROR)


def guarded(fn):
    """Decorate a command body with run_guarded (click commands run inside the main guard too;
    this keeps a command safe when it is invoked on its own, e.g. by click's test runner)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return run_guarded(fn, *args, **kwargs)

    return wrapper


def not_empty(ctx, param, value):
    """click callback: an option given with an empty value (`--batch ""`) is an error, never the
    same as leaving the option out."""
    import click

    if value is not None and not str(value).strip():
        raise click.BadParameter("is empty; give a value, or leave the option out")
    return value


def check_timeout(ctx, param, value: float) -> float:
    """click callback for --timeout: a finite number of seconds, more than 0, at most MAX_TIMEOUT_S."""
    import math

    import click

    from entrypoint.core.base import limits

    if not (math.isfinite(value) and 0 < value <= limits.MAX_TIMEOUT_S):
        raise click.BadParameter(f"must be more than 0 and at most {limits.MAX_TIMEOUT_S:g} seconds, not {value}")
    return value
