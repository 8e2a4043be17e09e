"""What every command shares: turning user errors into one message and exit code 2."""

from __future__ import annotations

import functools
import sys
from typing import NoReturn

from entrypoint.core.errors import EXIT_USAGE, KimiError

EXIT_BROKEN_IMAGE = 3


def fail(err: KimiError) -> NoReturn:
    print(f"kimi-serve: error: {err.message}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


def guarded(fn):
    """Run a command body; a KimiError ends it with its message and exit code 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from entrypoint.core.recipe import RecipeDataError

        try:
            return fn(*args, **kwargs)
        except KimiError as err:
            fail(err)
        except RecipeDataError as err:
            print(f"kimi-serve: error: {err} (a defect of this image: please report it)", file=sys.stderr)
            sys.exit(EXIT_BROKEN_IMAGE)

    return wrapper
