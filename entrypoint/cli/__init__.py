"""`kimi-serve`: with no command (or only vLLM args) it launches vLLM; otherwise it runs a command.

Commands live one per module and are imported only when used, so a container start pays for
nothing it does not run.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import List, Optional

from entrypoint.cli import _context
from entrypoint.cli._context import TERMINATION_LOG, run_guarded, say
from entrypoint.core.base.errors import KimiError

# command name -> (module, one-line help). Each module exposes a click command named `command`.
COMMANDS = {
    "print": ("entrypoint.cli.print_launch", "Print this container's launch (argv and env) and exit."),
    "plan": ("entrypoint.cli.plan", "Print every process of the deployment (shell, json, compose, k8s)."),
    "explain": ("entrypoint.cli.explain", "Say where each flag and variable of the launch came from."),
    "list": ("entrypoint.cli.list_recipes", "List hardware, variants, strategies, features, profiles."),
    "doctor": ("entrypoint.cli.doctor", "Detect the hardware, run every node check, print a report."),
    "healthcheck": ("entrypoint.cli.healthcheck", "Query the local server's /health (exit 0/1); --ready: readiness."),
    "drain": ("entrypoint.cli.drain", "Take this container out of readiness, then wait (a preStop hook)."),
    "verify": ("entrypoint.cli.verify", "Check a running server the way its clients use it."),
    "bench": ("entrypoint.cli.bench", "Measure a running server with `vllm bench serve` over a concurrency sweep."),
    "front": ("entrypoint.cli.front", "Serve the stream front before the router (a fleet's router container runs it)."),
    "download": ("entrypoint.cli.download", "Fetch (or --verify) the weights this launch loads into the cache."),
}

USAGE = """\
Usage: kimi-serve [VLLM_ARGS...]        validate, print the launch, exec vLLM
       kimi-serve COMMAND [OPTIONS]     run a command (COMMAND --help for its options)

Settings come from KIMI_* environment variables (and the TOML file named by KIMI_CONFIG);
arguments that are not a command are vLLM arguments, added after the recipe's.

Commands:
"""


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    return USAGE + "\n".join(f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items())


# Things people type as a container command that are not vLLM arguments.
SHELLS = ("bash", "sh", "/bin/bash", "/bin/sh", "zsh", "ash", "dash", "python", "python3")
# Commands that must answer 0/1 only (Docker's HEALTHCHECK treats 2 as reserved).
ZERO_ONE = ("healthcheck",)


def _unknown_command(word: str) -> KimiError:
    import difflib

    from entrypoint.core.base.errors import INVALID_VALUE

    if word in SHELLS or word.rsplit("/", 1)[-1] in SHELLS:
        return KimiError(INVALID_VALUE, f"'{word}' is not a kimi-serve command and kimi-serve runs no shell: for a "
                         f"shell in the image use `docker run -it --entrypoint {word} IMAGE` (Kubernetes: command:).")
    close = difflib.get_close_matches(word, list(COMMANDS), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return KimiError(INVALID_VALUE, f"'{word}' is not a kimi-serve command.{hint} Commands: {', '.join(COMMANDS)}; "
                     "vLLM arguments start with '-' (e.g. --max-model-len 65536).")


def _check_setting_names(warn: bool) -> None:
    from entrypoint.core.base.errors import INVALID_VALUE
    from entrypoint.core.compose.settings import check_names

    errors, warnings = check_names(os.environ)
    if errors:
        raise KimiError(INVALID_VALUE, errors[0])
    for warning in warnings if warn else ():
        say(warning, level="warning")


def _run_command(name: str, args: List[str]) -> None:
    import click

    module = importlib.import_module(COMMANDS[name][0])
    _check_setting_names(warn=True)
    try:
        code = module.command.main(args=args, prog_name=f"kimi-serve {name}", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.exceptions.Abort:
        raise KeyboardInterrupt from None
    except click.ClickException as exc:
        raise KimiError("usage", f"kimi-serve {name}: {exc.format_message()} (see `kimi-serve {name} --help`)",
                        1 if name in ZERO_ONE else exc.exit_code) from None
    if isinstance(code, int) and code:  # --help returns 0; a command's ctx.exit(n) returns n
        sys.exit(code)


def _json_log() -> bool:
    """KIMI_LOG_FORMAT read through the settings like every other variable (the environment, else
    the KIMI_CONFIG file). Never failing: when the settings cannot be read (that error is what
    gets reported), the file and the variable alone are asked, then the default (text)."""
    from entrypoint.core.compose.settings import BY_NAME, read_settings

    names = (BY_NAME["config"].env, BY_NAME["log_format"].env)
    for environ in (os.environ, {k: os.environ[k] for k in names if k in os.environ},
                    {k: os.environ[k] for k in names[1:] if k in os.environ}):
        try:
            return read_settings(environ).log_format == "json"
        except Exception:  # noqa: BLE001 - the guard's own input: fall back, never fail here
            continue
    return False


def main(argv: Optional[List[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    _context.ARGV[:] = args
    if args and args[0] in COMMANDS:
        run_guarded(_run_command, args[0], args[1:], error_exit=1 if args[0] in ZERO_ONE else None)
        return
    if args and args[0] in ("-h", "--help", "help"):
        print(usage())
        return
    if args and args[0] == "--version":
        from entrypoint import __version__

        print(f"kimi-serve {__version__}")
        return
    run_guarded(_start, args, json_log=_json_log(), termination_log=TERMINATION_LOG)


def _start(args: List[str]) -> None:
    if args and not args[0].startswith("-"):
        from entrypoint.app.launch import wire_platform

        left = wire_platform(tuple(args)).args  # a platform's start command (SageMaker's `serve`) is no typo
        if left and not left[0].startswith("-"):
            raise _unknown_command(left[0])
    _check_setting_names(warn=False)  # the start log carries the warnings
    from entrypoint.app.serve import start

    start(args, termination_log=TERMINATION_LOG)
