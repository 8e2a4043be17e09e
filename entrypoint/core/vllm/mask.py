"""Secrets never reach a log or a printed launch: mask them in env and argv."""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from entrypoint.core.base import limits
from entrypoint.core.base.files import read_text_capped
from entrypoint.core.vllm.vllm_cli import is_secret_option, secret_positions

MASK = "****"

# Which variable names are secrets (issue 40): whole `_`-delimited words of the name, in any case, never
# a substring (TOKENIZERS_PARALLELISM, VLLM_USE_FASTOKENS, VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE are knobs).
# A name holds a secret when one of SECRET_WORDS (a word, or a run of words) is among its words:
# AZURE_CLIENT_SECRET, DB_PASSWORD, AWS_SECRET_ACCESS_KEY, S3_ACCESS_KEY_ID, OPENAI_API_KEY.
SECRET_WORDS = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS",
                "API_KEY", "ACCESS_KEY", "PRIVATE_KEY", "SECRET_KEY")
# TOKEN, in a server of language models, is as often the unit of text (VLLM_..._STREAM_TOKEN_THRESHOLD,
# BOS_TOKEN_ID) as a credential: it names a secret only as the name's last word, a number aside
# (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, AWS_SESSION_TOKEN, GITHUB_TOKEN_2).
SECRET_LAST_WORDS = ("TOKEN",)


def _secret_name_pattern() -> str:
    """The rule as one anchored regular expression of `_`-delimited words, upper case (matched
    ignoring case here; the chart's schema spells each letter in both cases): no lookaround, so that
    the chart's JSON Schema (Go's RE2) takes the very same text."""
    anywhere = "|".join(SECRET_WORDS)
    last = "|".join(SECRET_LAST_WORDS)
    return f"^(?:[^_]*_)*(?:(?:{anywhere})(?:_[^_]*)*|(?:{last})(?:_[0-9]+)*)$"


SECRET_ENV = re.compile(_secret_name_pattern(), re.I)


# Variables that name a file or a directory holding a secret: their values are paths (a rendered
# deployment writes HF_TOKEN_PATH's down), the secret is the file's content (`file_secrets`).
# (The chart's schema takes SECRET_ENV and these, as is_secret_name does: buildsys/chart.py.)
SECRET_PATH_NAMES = _PATH_NAMES = re.compile(r"(_PATH|_FILE|_DIR|^GOOGLE_APPLICATION_CREDENTIALS)$", re.I)
# The files whose content is a secret the product's own libraries read and could echo: the hub's
# token (HF_TOKEN_PATH, else $HF_HOME/token, as huggingface_hub reads it).
_TOKEN_FILES = ("HF_TOKEN_PATH",)


def is_secret_name(name: str) -> bool:
    """Whether a variable's value is a secret: its name's words hold a secret word (SECRET_ENV), and
    it does not name the path of one (_PATH_NAMES: HF_TOKEN_PATH, DB_PASSWORD_FILE)."""
    return bool(SECRET_ENV.match(name)) and not _PATH_NAMES.search(name)


# Values never hunted for in what is printed or written, whoever holds them: a boolean, or a number of
# at most SHORT_NUMBER digits (every port, count, size or id a rendered file writes is one: `true`,
# `8000`, `65534`). A "secret" that short is guessed, not kept; hunting it masks every `true` and
# every port of a manifest, and refuses the file. A longer number (a PIN, a key) is still hunted.
BOOLEANS = frozenset({"true", "false", "yes", "no", "on", "off"})
SHORT_NUMBER = 5


def is_plain_value(value: str) -> bool:
    """A value that cannot be told from the words around it (a boolean, a short number): never a
    secret to look for in a text."""
    word = value.strip()
    return word.lower() in BOOLEANS or (word.isascii() and word.isdigit() and len(word) <= SHORT_NUMBER)


def _home_token(environ: Mapping[str, str]) -> str:
    home = environ.get("HF_HOME") or ""
    return f"{home.rstrip('/')}/token" if home else ""


def file_secrets(environ: Mapping[str, str]) -> list:
    """The secrets read from files: the content of HF_TOKEN_PATH (or $HF_HOME/token), read the
    bounded way (a regular file of at most MAX_KEY_FILE_BYTES; anything else gives nothing)."""
    paths = [environ.get(name, "") for name in _TOKEN_FILES] + [_home_token(environ)]
    found = []
    for path in paths:
        if path:
            found += _file_secret(path)
    return found


def _file_secret(path: str) -> list:
    try:
        text = read_text_capped(path, limits.MAX_KEY_FILE_BYTES)
    except (OSError, ValueError):
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def url_passwords(environ: Mapping[str, str]) -> list:
    """The password of every URL a variable's value carries (KIMI_MODEL=s3://key:password@bucket),
    and every credential in its query (`?access_token=...`): a message that quotes it without its URL
    still hides it."""
    return [m.group(3) for value in environ.values() if "://" in value for m in _USERINFO.finditer(value)
            if m.group(3)] + [m.group(2) for value in environ.values() if "?" in value
                              for m in _QUERY_SECRET.finditer(value)]


def mask_env(env: Mapping[str, str]) -> dict:
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}


def mask_argv(argv: Sequence[str]) -> list:
    """argv with the value of every option vLLM marks as a credential (`--api-key`, `--hf-token`,
    in every spelling vLLM accepts: `_` for `-`, `--opt=value`, abbreviations, several values)
    replaced by the mask. The options come from vLLM's own grammar (entrypoint.core.vllm.vllm_cli)."""
    out = list(argv)
    for i in secret_positions(argv):
        tok = out[i]
        out[i] = f"{tok.split('=', 1)[0]}={MASK}" if tok.startswith("-") and "=" in tok else MASK
    return out


_USER_PASSWORD = re.compile(r"(?<![\w/.:+@-])[^\s/@:]+:[^\s/@]*@")


def mask_value(text: str, host: bool = False) -> str:
    """A value a user typed, as a message quotes it: a URL's password (`s3://u:****@bucket`) and a
    bare `user:password@` (`****@h1`) masked; with `host` (the text is one host entry of an address
    setting) anything before its last '@' is user information (`pw@h1` -> `****@h1`). The one mask
    of user information in messages. Not for whole renderings: `name:tag@sha256:...` there is an
    image reference."""
    if host and "@" in text:
        return MASK + "@" + text.rsplit("@", 1)[1]
    return _USER_PASSWORD.sub(MASK + "@", mask_userinfo(text))


def mask_text(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4 and not is_plain_value(secret):
            text = text.replace(secret, MASK)
    return text


def secret_values(environ: Mapping[str, str], argv: Sequence[str] = ()) -> list:
    """Every secret a message could leak: values of secret-named variables, and the values of
    vLLM's credential options in argv and in KIMI_EXTRA_ARGS (split on blanks, quotes or not, so
    that an unbalanced quote still hides them). A boolean or a short number is none
    (is_plain_value): where it stands after a credential option or in a URL's userinfo, the
    mask of that spelling (mask_flags, mask_userinfo) still hides it."""
    found = [v for k, v in environ.items() if is_secret_name(k) and v]
    found += file_secrets(environ) + url_passwords(environ)
    for words in (list(argv), [w.strip("'\"") for w in environ.get("KIMI_EXTRA_ARGS", "").split()]):
        masked = mask_argv(words)
        found += [w.split("=", 1)[1] if w.startswith("-") and "=" in w else w
                  for w, m in zip(words, masked) if w != m]
    return sorted({s for s in found if s and not is_plain_value(s)}, key=len, reverse=True)


_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w.-]*)")
# After a credential option: `=` or blanks, then the value: quoted (the quotes kept, all inside
# masked, blanks included) or one word (not an option: argparse would not take it as the value).
_VALUE = re.compile(r"""(?:=|\s+)(?:'(?P<single>[^']*)'?|"(?P<double>[^"]*)"?|(?P<word>[^\s'"]+))""")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/@:]*):([^\s/@]*)@")
# A URL's query parameter that carries a credential (`?access_token=`, `&token=`, `&key=`, `&sig=`,
# S3's `X-Amz-Signature=` and `X-Amz-Security-Token=`, GCS's `X-Goog-Signature=`): its name ends in one of
# these words, in any case; the value runs to the next `&`, `#`, blank or quote.
QUERY_SECRET_WORDS = ("token", "key", "apikey", "signature", "sig", "secret", "password", "passwd", "pwd",
                      "credential", "credentials", "auth", "authorization")
QUERY_SECRET_NAME = r"[?&;](?:[\w.\-]*[_.\-])?(?:" + "|".join(QUERY_SECRET_WORDS) + ")="  # RE2 takes it too
_QUERY_SECRET = re.compile(r"(?i)(" + QUERY_SECRET_NAME + r")([^&#\s'\"]+)")


def mask_flags(text: str) -> str:
    """The value after a credential option anywhere in a message (`--api-key X`, `--api_key=X`,
    `--api-k 'X'`: every spelling vLLM accepts, through its own grammar), whatever setting it was
    typed into, masked."""
    out, pos = [], 0
    for flag in _FLAG.finditer(text):
        name = flag.group(1)
        # `-api-key`: a credential option that lost a dash on the way (KIMI_FEATURES' `-<feature>`)
        lost_dash = not name.startswith("--") and len(name) > 2 and is_secret_option("-" + name)
        if flag.start() < pos or not (is_secret_option(name) or lost_dash):
            continue
        value = _VALUE.match(text, flag.end())
        if value is None:
            continue
        group = next(g for g in ("single", "double", "word") if value.group(g) is not None)
        if group == "word" and text[flag.end()] != "=" and value.group(group).startswith("-"):
            continue  # the next option, not a value
        out.append(text[pos:value.start(group)] + MASK)
        pos = value.end(group)
    return "".join(out) + text[pos:]


def mask_userinfo(text: str) -> str:
    """`scheme://user:password@host` -> `scheme://user:****@host`, and `?access_token=X` ->
    `?access_token=****` (a URL given with credentials, in its userinfo or its query)."""
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", text)
    return _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, text) if "=" in text else text


def url_credential(text: str) -> str:
    """Where a URL carries a credential: "user information" (`user:password@`), "the query parameter
    NAME", or "" when it carries none."""
    if _USERINFO.search(text):
        return "user information (user:password@)"
    found = _QUERY_SECRET.search(text)
    return f"the query parameter {found.group(1)[1:-1]}" if found else ""


def mask_output(text: str, environ: Mapping[str, str], argv: Sequence[str] = ()) -> str:
    """The one masking of whatever anything prints or writes (errors, logs, reports,
    explanations, the hub's words, rendered files): the values of secret-named variables and of
    credential options, the secrets read from files (HF_TOKEN_PATH), the value after a credential
    option in any spelling, and the password of a URL."""
    return mask_flags(mask_text(mask_userinfo(text), secret_values(environ, argv)))


def written_secret(text: str, environ: Mapping[str, str], argv: Sequence[str] = ()) -> str:
    """"" when `text` holds no secret, else the first line that does, masked (for a message):
    a file kimi-serve would write is refused rather than written masked (what is printed is what
    is deployed)."""
    masked = mask_output(text, environ, argv)
    if masked == text:
        return ""
    for number, (line, shown) in enumerate(zip(text.splitlines(), masked.splitlines()), 1):
        if line != shown:
            shown = " ".join(shown.split())
            return f"line {number}: {shown[:160]}{'...' if len(shown) > 160 else ''}"
    return "a secret"
