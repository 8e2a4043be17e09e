"""The one settings model: every KIMI_* setting, declared once with its type, default and help.

Precedence (lowest to highest): built-in defaults < the TOML file named by KIMI_CONFIG (keys in
lower case without the prefix) < the environment. Container arguments are vLLM arguments and
come after KIMI_EXTRA_ARGS. The README's settings table is generated from `FIELDS`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Mapping

from entrypoint.core.errors import INVALID_VALUE, KimiError, unknown_value

@dataclass(frozen=True)
class Field:
    name: str  # attribute name and TOML key
    # str | int | bool | list | choice | spec (a comma list kept as written: "" = none, unset = default)
    kind: str
    default: Any
    default_doc: str  # the default as documented (may be a rule, not a value)
    help: str
    group: str = "launch"
    choices: tuple = ()

    @property
    def env(self) -> str:
        return "KIMI_" + self.name.upper()


F = Field
FIELDS: tuple = (
    F("hardware", "str", None, "the image's own target; `auto` = detect",
      "Hardware id: h100, h200, b200, gb200, b300, gb300, mi300x, mi325x, mi350x, mi355x, or `auto`."),
    F("variant", "str", "default", "`default`", "Checkpoint variant: default (INT4), nvfp4 (Blackwell), mxfp4 (MI355X)."),
    F("strategy", "str", None, "`single_node_tp`; `multi_node_tp` when KIMI_NODES > 1",
      "Serving strategy id (`kimi-serve list` shows them)."),
    F("features", "spec", None, "the recipe's defaults for the hardware",
      "Comma list of features; empty = none; `+f` / `-f` add to / remove from the defaults."),
    F("profile", "str", None, "none", "Tuned profile: flydsl, aiter-mxfp4, inferencex."),
    F("nodes", "int", 1, "`1`", "Number of nodes of a multi-node deployment.", "cluster"),
    F("node_rank", "int", 0, "`0`", "This node's rank (multi-node) or its index in its pool (prefill/decode).", "cluster"),
    F("head_addr", "str", None, "required when KIMI_NODES > 1", "Rendezvous address of rank 0 (`$HEAD_IP`).", "cluster"),
    F("iface", "str", None, "required where the strategy needs it",
      "Network interface for GLOO/NCCL (`$IFACE_NAME`).", "cluster"),
    F("role", "choice", None, "required to launch a pd_cluster process",
      "Which pd_cluster process this container runs.", "pd", ("prefill", "decode", "router")),
    F("prefill_nodes", "int", None, "the recipe's pools", "Prefill pool size in nodes; 0 = the two pools share one node.", "pd"),
    F("decode_nodes", "int", None, "the recipe's pools", "Decode pool size in nodes; 0 = the two pools share one node.", "pd"),
    F("prefill_parallelism", "choice", None, "the recipe's", "Prefill pool parallelism.", "pd", ("tp", "tep", "dep")),
    F("decode_parallelism", "choice", None, "the recipe's", "Decode pool parallelism.", "pd", ("tp", "tep", "dep")),
    F("prefill_addrs", "list", (), "required for pd_cluster", "Comma list of prefill node addresses (`$PREFILL_NODE_i`).", "pd"),
    F("decode_addrs", "list", (), "required for pd_cluster", "Comma list of decode node addresses (`$DECODE_NODE_i`).", "pd"),
    F("prefill_dp_rpc_port", "int", 29550, "`29550`", "DP RPC port of the prefill pool.", "pd"),
    F("decode_dp_rpc_port", "int", 29560, "`29560`", "DP RPC port of the decode pool.", "pd"),
    F("router_host", "str", "0.0.0.0", "`0.0.0.0`", "Router bind address.", "pd"),
    F("router_port", "int", 8000, "`8000`", "Router port.", "pd"),
    F("model", "str", None, "the variant's model id", "A local path or another repo id to load instead."),
    F("served_model_name", "str", None, "the variant's model id (also when KIMI_MODEL is a path)",
      "Name clients use; `--served-model-name` is emitted only when it differs from the model argument."),
    F("host", "str", None, "vLLM's default (not emitted)", "API bind address."),
    F("port", "int", None, "vLLM's default, 8000 (not emitted)", "API port (single node and multi-node head)."),
    F("extra_args", "str", None, "none", "More vLLM args, split like a shell would (shlex), never run through a shell."),
    F("skip_memory_check", "bool", False, "`0`", "1 = allow a deployment below the variant's VRAM minimum."),
    F("dry_run", "bool", False, "`0`", "1 = print the launch and exit 0."),
    F("preflight", "choice", "on", "`on`", "Node checks before exec: on, warn (errors become warnings), off.",
      "runtime", ("on", "warn", "off")),
    F("log_format", "choice", "text", "`text`", "Start-up log format: text or json.", "runtime", ("text", "json")),
    F("cache_dir", "str", "/cache", "`/cache`", "Mount point for the Hugging Face and vLLM caches.", "runtime"),
    F("image", "str", None, "the project's published image for the target", "Image that rendered deployments run.", "deploy"),
    F("name", "str", "kimi-k2-5", "`kimi-k2-5`", "Name of a rendered deployment.", "deploy"),
    F("image_target", "str", None, "baked in at build", "The image's build target (set by the image).", "image"),
    F("image_hardware", "str", None, "baked in at build", "The image's default KIMI_HARDWARE (set by the image).", "image"),
    F("image_serves", "list", (), "baked in at build", "Hardware ids the image serves (set by the image).", "image"),
    F("config", "str", None, "none", "Path of a TOML file with the same keys in lower case, without the prefix.", "file"),
)
del F

BY_NAME = {f.name: f for f in FIELDS}
BY_ENV = {f.env: f for f in FIELDS}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Settings:
    """Typed settings; attribute names are the field names. `origin` says where each came from."""

    values: Mapping[str, Any]
    origin: Mapping[str, str]  # field name -> "default" | "file" | "env"
    user_args: tuple = ()  # container arguments (vLLM args)
    warnings: tuple = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def is_set(self, name: str) -> bool:
        return self.origin.get(name, "default") != "default"

    def vllm_user_args(self) -> tuple:
        """KIMI_EXTRA_ARGS (shell-split, never run through a shell) then the container args."""
        extra = self.values.get("extra_args")
        try:
            parts = shlex.split(extra) if extra else []
        except ValueError as exc:
            raise KimiError(INVALID_VALUE, f"KIMI_EXTRA_ARGS cannot be split like a shell line ({exc}): {extra!r}. "
                            "Check its quotes.") from None
        return tuple(parts) + tuple(self.user_args)


def _convert(field: Field, raw: Any, where: str) -> Any:
    label = field.env if where == "env" else f"{field.name} in the KIMI_CONFIG file"
    if field.kind == "int":
        if isinstance(raw, bool):
            raise KimiError(INVALID_VALUE, f"{label} must be a whole number, not {raw!r}.")
        if isinstance(raw, int):
            return raw
        text = str(raw).strip()
        if not re.fullmatch(r"[+-]?\d+", text):
            hint = ""
            if field.name == "port" and "://" in text:
                hint = (" This looks like a Kubernetes service link (a Service named 'kimi'): set "
                        "enableServiceLinks: false in the pod spec or rename the Service.")
            raise KimiError(INVALID_VALUE, f"{label} must be a whole number, not {raw!r}.{hint}")
        return int(text)
    if field.kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise KimiError(INVALID_VALUE, f"{label} must be 1 or 0 (true/false), not {raw!r}.")
    if field.kind == "list":
        items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
        return tuple(str(i).strip() for i in items if str(i).strip())
    if field.kind == "spec":
        return ",".join(str(i) for i in raw) if isinstance(raw, (list, tuple)) else str(raw).strip()
    if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
        raise KimiError(INVALID_VALUE, f"{label} must be a string, not {raw!r}.")
    text = str(raw).strip()
    if field.kind == "choice":
        if text == "" and field.default is None:
            return None
        if text.lower() not in field.choices:
            raise unknown_value(field.env, text, field.choices)
        return text.lower()
    return text or None


def _read_file(path: str) -> dict:
    try:
        import tomllib as _toml
    except ImportError:  # Python < 3.11
        import tomli as _toml  # type: ignore[no-redef]
    try:
        with open(path, "rb") as fh:
            data = _toml.load(fh)
    except OSError as exc:
        raise KimiError(INVALID_VALUE, f"KIMI_CONFIG={path}: cannot read it ({exc.strerror}).") from None
    except _toml.TOMLDecodeError as exc:
        raise KimiError(INVALID_VALUE, f"KIMI_CONFIG={path} is not valid TOML: {exc}.") from None
    unknown = [k for k in data if k not in BY_NAME or k == "config"]
    if unknown:
        key = unknown[0]
        raise unknown_value(f"key in KIMI_CONFIG file {path}", key, [f.name for f in FIELDS if f.name != "config"],
                            "Keys are the KIMI_* names in lower case without the prefix.")
    return data


def read_settings(environ: Mapping[str, str], user_args: tuple = ()) -> Settings:
    """Defaults < KIMI_CONFIG file < environment. Pure apart from reading the named file."""
    values = {f.name: f.default for f in FIELDS}
    origin = {f.name: "default" for f in FIELDS}
    warnings = []
    config_path = environ.get("KIMI_CONFIG")
    if config_path:
        for key, raw in _read_file(config_path).items():
            values[key] = _convert(BY_NAME[key], raw, "file")
            origin[key] = "file"
    for env_name, raw in environ.items():
        if not env_name.startswith("KIMI_"):
            continue
        field = BY_ENV.get(env_name)
        if field is None:
            # Kubernetes injects <SERVICE>_SERVICE_HOST / _PORT_* variables; never fail on those.
            warnings.append(f"{env_name} is not a kimi-serve setting and is ignored"
                            + _did_you_mean(env_name))
            continue
        values[field.name] = _convert(field, raw, "env")
        origin[field.name] = "env"
    settings = Settings(values=values, origin=origin, user_args=tuple(user_args), warnings=tuple(warnings))
    _check_ranges(settings)
    return settings


def _did_you_mean(env_name: str) -> str:
    import difflib

    close = difflib.get_close_matches(env_name, list(BY_ENV), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _check_ranges(s: Settings) -> None:
    if s.nodes < 1:
        raise KimiError(INVALID_VALUE, f"KIMI_NODES must be 1 or more, not {s.nodes}.")
    if s.node_rank < 0:
        raise KimiError(INVALID_VALUE, f"KIMI_NODE_RANK must be 0 or more, not {s.node_rank}.")
    for name in ("prefill_nodes", "decode_nodes"):
        value = s.values[name]
        if value is not None and value < 0:
            raise KimiError(INVALID_VALUE, f"{BY_NAME[name].env} must be 0 or more, not {value}.")
    for name in ("port", "router_port", "prefill_dp_rpc_port", "decode_dp_rpc_port"):
        value = s.values[name]
        if value is not None and not 0 < value < 65536:
            raise KimiError(INVALID_VALUE, f"{BY_NAME[name].env} must be a TCP port (1-65535), not {value}.")
