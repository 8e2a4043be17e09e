"""Secrets never reach a log or a printed launch: mask them in env and argv."""

from __future__ import annotations

import re
from typing import Mapping, Sequence

MASK = "****"
_SECRET_ENV = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
_SECRET_FLAGS = ("--api-key", "--hf-token", "--token")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_ENV.search(name))


def mask_env(env: Mapping[str, str]) -> dict:
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}


def mask_argv(argv: Sequence[str]) -> list:
    out = []
    hide_next = False
    for tok in argv:
        if hide_next and not tok.startswith("-"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _ = tok.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={MASK}")
                continue
            hide_next = True
        out.append(tok)
    return out


def mask_text(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    return text
