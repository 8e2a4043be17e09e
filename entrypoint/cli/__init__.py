"""`kimi-serve`: with no command (or only vLLM args) it launches vLLM; otherwise it runs a command.

Commands live one per module and are imported only when used, so a container start pays for
nothing it does not run.
"""

from __future__ import annotations

import importlib
import sys
from typing import List, Optional

# command name -> (module, one-line help). Each module exposes a click command named `command`.
COMMANDS = {
    "print": ("entrypoint.cli.print_launch", "Print this container's launch (argv and env) and exit."),
    "plan": ("entrypoint.cli.plan", "Print every process of the deployment (shell, json, compose, k8s)."),
    "explain": ("entrypoint.cli.explain", "Say where each flag and variable of the launch came from."),
    "list": ("entrypoint.cli.list_recipes", "List hardware, variants, strategies, features, profiles."),
    "doctor": ("entrypoint.cli.doctor", "Detect the hardware, run every node check, print a report."),
    "healthcheck": ("entrypoint.cli.healthcheck", "Query the local server's /health (exit 0/1)."),
    "verify": ("entrypoint.cli.verify", "Check a running server the way its clients use it."),
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


def main(argv: Optional[List[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in COMMANDS:
        module = importlib.import_module(COMMANDS[args[0]][0])
        module.command.main(args=args[1:], prog_name=f"kimi-serve {args[0]}")
        return
    if args and args[0] in ("-h", "--help", "help"):
        print(usage())
        return
    if args and args[0] == "--version":
        from entrypoint import __version__

        print(f"kimi-serve {__version__}")
        return
    from entrypoint.app import start
    from entrypoint.cli._context import guarded

    guarded(start)(args)
