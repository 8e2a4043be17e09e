"""Secrets never reach a log or a printed launch: mask them in env and argv."""

from __future__ import annotations

import re
from typing import Mapping, Sequence

MASK = "****"
_SECRET_ENV = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_ENV.search(name))


def mask_env(env: Mapping[str, str]) -> dict:
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}


def mask_argv(argv: Sequence[str]) -> list:
    """argv with the value of every option vLLM marks as a credential (`--api-key`, `--hf-token`,
    in every spelling vLLM accepts: `_` for `-`, `--opt=value`, abbreviations, several values)
    replaced by the mask. The options come from vLLM's own grammar (entrypoint.core.vllm_cli)."""
    from entrypoint.core.vllm_cli import secret_positions

    out = list(argv)
    for i in secret_positions(argv):
        tok = out[i]
        out[i] = f"{tok.split('=', 1)[0]}={MASK}" if tok.startswith("-") and "=" in tok else MASK
    return out


def mask_text(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    return text
