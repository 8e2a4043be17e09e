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


def secret_flag_strings() -> tuple:
    """The option strings vLLM marks as credentials (`--api-key`, `--hf-token`, ...), longest first."""
    from entrypoint.core.vllm_cli import secret_spec

    strings = {t for o in secret_spec().options.values() if o.secret for t in o.strings}
    return tuple(sorted(strings, key=len, reverse=True))


def secret_values(environ: Mapping[str, str], argv: Sequence[str] = ()) -> list:
    """Every secret a message could leak: values of secret-named variables, and the values of
    vLLM's credential options in argv and in KIMI_EXTRA_ARGS (split on blanks, quotes or not, so
    that an unbalanced quote still hides them)."""
    found = [v for k, v in environ.items() if is_secret_name(k) and v]
    for words in (list(argv), [w.strip("'\"") for w in environ.get("KIMI_EXTRA_ARGS", "").split()]):
        masked = mask_argv(words)
        found += [w.split("=", 1)[1] if w.startswith("-") and "=" in w else w
                  for w, m in zip(words, masked) if w != m]
    return sorted({s for s in found if s}, key=len, reverse=True)


def mask_flags(text: str) -> str:
    """The value after a credential option (`--api-key X`, `--api-key=X`) anywhere in a message,
    whatever setting it was typed into, masked."""
    flags = "|".join(re.escape(f) for f in secret_flag_strings())
    if not flags:
        return text
    pattern = r"(?<![\w-])(%s)(=|\s+)(['\"]?)[^\s'\"]+" % flags
    return re.sub(pattern, lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{MASK}", text)
