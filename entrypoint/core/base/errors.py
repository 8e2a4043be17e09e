"""The one error type users see: a code (used in JSON output) and a message with a way out."""

from __future__ import annotations

import difflib
from typing import Iterable

# Error codes that appear in JSON output (`plan --batch`, `print --format json`).
UNKNOWN_VALUE = "unknown_value"
UNSUPPORTED_COMBINATION = "unsupported_combination"
CONFLICTING_FEATURES = "conflicting_features"
INSUFFICIENT_MEMORY = "insufficient_memory"
MISSING_SETTING = "missing_setting"
INVALID_VALUE = "invalid_value"
PREFLIGHT_FAILED = "preflight_failed"
INTERNAL_ERROR = "internal_error"

EXIT_USAGE = 2


def one_line(text: str) -> str:
    """`text` on one line: a line break or another control character a value carried, escaped as
    Python writes it (`\\n`), so that a message stays one line whatever it quotes."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class KimiError(Exception):
    """A user-facing error: ends the program with exit code 2 (or `exit_code`) and one clear message."""

    def __init__(self, code: str, message: str, exit_code: int = EXIT_USAGE, see: str = "", listing: bool = False):
        if not listing:  # one line whatever a quoted value holds (`listing`: a report of one problem per line)
            message, see = one_line(message), one_line(see)
        full = f"{message} {see}" if see else message
        super().__init__(full)
        self.code = code
        self.message = full
        self.exit_code = exit_code  # 2; the exec edge uses 126/127 as a shell does
        self.own = message  # without `see`: what a command that is itself the pointer shows (doctor)
        self.see = see  # the sentence that points at another command (`kimi-serve doctor`), or ""

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


def unknown_value(setting: str, value: str, valid: Iterable[str], way_out: str = "") -> KimiError:
    """An unknown value: name the valid ones and the closest match."""
    valid = list(valid)
    tail = f" {way_out}" if way_out else ""
    if not valid:  # never an empty list of valid values: say there are none, and the way out
        return KimiError(UNKNOWN_VALUE, f"{setting}={value!r} is not known: there are no valid values here.{tail}")
    hint = did_you_mean(value, valid)
    return KimiError(
        UNKNOWN_VALUE,
        f"{setting}={value!r} is not known. Valid values: {', '.join(valid)}.{hint}{tail}",
    )


def did_you_mean(value: str, valid: Iterable[str]) -> str:
    """` Did you mean 'x'?` for the valid value closest to `value` (a near spelling, or a short form:
    one part of a hyphenated name), else ""."""
    valid = list(valid)
    close = [v for v in valid if str(v).lower() == str(value).strip().lower()][:1] or \
        difflib.get_close_matches(str(value), valid, n=1) or \
        difflib.get_close_matches(str(value).lower(), valid, n=1)
    if not close:  # a short form: `k3` for `kimi-k3`, `h200` written `H200` is matched above
        text = str(value).strip().lower()
        close = [v for v in valid if text and (v.lower().endswith("-" + text) or v.lower().startswith(text + "-"))][:1]
    return f" Did you mean '{close[0]}'?" if close else ""
