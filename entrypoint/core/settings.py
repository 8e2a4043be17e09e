"""The one settings model: every variable the entrypoint reads, declared once with its type,
default and help: the KIMI_* settings, and the variables others set that it reads (a
LeaderWorkerSet's LWS_*, Slurm's SLURM_*, the GPU visibility and hub variables).

Precedence (lowest to highest): built-in defaults < the TOML file named by KIMI_CONFIG (keys in
lower case without the prefix; KIMI_* settings only) < the environment. Container arguments are
vLLM arguments and come after KIMI_EXTRA_ARGS. The README's tables are generated from `FIELDS`.
`{hardware}` and `{variants}` in a help text are filled from the recipe data when documented.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from entrypoint.core.errors import INVALID_VALUE, KimiError, unknown_value

PYTHON_TYPES = {"str": Optional[str], "int": Optional[int], "bool": bool, "list": tuple, "choice": Optional[str],
                "spec": Optional[str]}


@dataclass(frozen=True)
class Field:
    name: str  # attribute name and TOML key
    # str | int | bool | list | choice | spec (a comma list kept as written: "" = none, unset = default)
    kind: str
    default: Any
    default_doc: str  # the default as documented (may be a rule, not a value)
    help: str
    choices: tuple = ()
    # A variable someone else sets (a scheduler, the GPU runtime, the hub): its own name, who sets
    # it; read from the environment only, never from the KIMI_CONFIG file.
    external: Optional[str] = None
    owner: str = ""

    @property
    def env(self) -> str:
        return self.external or "KIMI_" + self.name.upper()


F = Field
FIELDS: tuple = (
    F("hardware", "str", None, "the image's own target; `auto` = detect",
      "Hardware id: {hardware}, or `auto`."),
    F("variant", "str", "default", "`default`", "Checkpoint variant: {variants}."),
    F("strategy", "str", None, "`single_node_tp`; `multi_node_tp` when KIMI_NODES > 1",
      "Serving strategy id (`kimi-serve list` shows them)."),
    F("features", "spec", None, "the recipe's defaults for the hardware",
      "Comma list of features; empty = none; `+f` / `-f` add to / remove from the defaults."),
    F("profile", "str", None, "none", "Tuned profile: {profiles}."),
    F("nodes", "int", 1, "`1`", "Number of nodes of a multi-node deployment."),
    F("node_rank", "int", 0, "`0`", "This node's rank (multi-node) or its index in its pool (prefill/decode)."),
    F("head_addr", "str", None, "required when KIMI_NODES > 1", "Rendezvous address of rank 0 (`$HEAD_IP`)."),
    F("iface", "str", None, "required where the strategy needs it",
      "Network interface for GLOO/NCCL (`$IFACE_NAME`)."),
    F("role", "choice", None, "required to launch a pd_cluster process",
      "Which pd_cluster process this container runs.", ("prefill", "decode", "router")),
    F("prefill_nodes", "int", None, "the recipe's pools", "Prefill pool size in nodes; 0 = the two pools share one node."),
    F("decode_nodes", "int", None, "the recipe's pools", "Decode pool size in nodes; 0 = the two pools share one node."),
    F("prefill_parallelism", "choice", None, "the recipe's", "Prefill pool parallelism.", ("tp", "tep", "dep")),
    F("decode_parallelism", "choice", None, "the recipe's", "Decode pool parallelism.", ("tp", "tep", "dep")),
    F("prefill_addrs", "list", (), "required for pd_cluster", "Comma list of prefill node addresses (`$PREFILL_NODE_i`)."),
    F("decode_addrs", "list", (), "required for pd_cluster", "Comma list of decode node addresses (`$DECODE_NODE_i`)."),
    F("prefill_dp_rpc_port", "int", 29550, "`29550`", "DP RPC port of the prefill pool."),
    F("decode_dp_rpc_port", "int", 29560, "`29560`", "DP RPC port of the decode pool."),
    F("router_host", "str", "0.0.0.0", "`0.0.0.0`", "Router bind address."),
    F("router_port", "int", 8000, "`8000`", "Router port."),
    F("model", "str", None, "the variant's model id", "A local path or another repo id to load instead."),
    F("model_revision", "str", None, "the repo's default branch (not emitted)",
      "Branch, tag or commit of the model repo: `--revision` of the launch and what `kimi-serve download` fetches."),
    F("served_model_name", "str", None, "the variant's model id (also when KIMI_MODEL is a path)",
      "Name clients use; `--served-model-name` is emitted only when it differs from the model argument."),
    F("host", "str", None, "vLLM's default (not emitted)", "API bind address."),
    F("port", "int", None, "vLLM's default, 8000 (not emitted)", "API port (single node and multi-node head)."),
    F("vllm_version", "str", None, "the image's vLLM (baked in at build); else the installed vLLM's; else the newest "
      "supported", "vLLM release the launch is for (e.g. 0.19.1): flags, choices and env are checked against its "
      "grammar (recipes/vllm/); set it for `print`/`plan` of another image."),
    F("extra_args", "str", None, "none", "More vLLM args, split like a shell would (shlex), never run through a shell."),
    F("skip_memory_check", "bool", False, "`0`", "1 = allow a deployment below the variant's VRAM minimum."),
    F("download", "bool", False, "`0`; `1` in the cloud renderings",
      "1 = the start runs `kimi-serve download` before preflight (platforms with one container and no init step)."),
    F("dry_run", "bool", False, "`0`", "1 = print the launch and exit 0."),
    F("preflight", "choice", "on", "`on`", "Node checks before exec: on, warn (errors become warnings), off.",
      ("on", "warn", "off")),
    F("log_format", "choice", "text", "`text`", "Start-up log format: text or json.", ("text", "json")),
    F("cache_dir", "str", "/cache", "`/cache`", "Mount point for the Hugging Face and vLLM caches."),
    F("image", "str", None, "the project's published image for the target", "Image that rendered deployments run."),
    F("name", "str", "kimi-k2-5", "`kimi-k2-5`", "Name of a rendered deployment."),
    F("image_target", "str", None, "baked in at build", "The image's build target (set by the image)."),
    F("image_hardware", "str", None, "baked in at build", "The image's default KIMI_HARDWARE (set by the image)."),
    F("image_serves", "list", (), "baked in at build", "Hardware ids the image serves (set by the image)."),
    F("config", "str", None, "none", "Path of a TOML file with the same keys in lower case, without the prefix."),
    F("platform", "str", None, "detected from the platform's own variables (and SageMaker's `serve` argument)",
      "Cloud container platform whose contract the container follows: sagemaker, vertex, azureml, skypilot, or "
      "`none` (docs/cloud.md)."),
    F("recipes_dir", "str", None, "the recipe data of the checkout or the package",
      "A directory of recipe data (kimi-k2.5.yaml, hardware.yaml, strategies/) to use instead; for maintainers."),
    # Variables others set, read by the cluster wiring, detection and preflight (env only).
    F("lws_leader_address", "str", None, "-", "Address of the group's leader pod: KIMI_HEAD_ADDR when unset.",
      external="LWS_LEADER_ADDRESS", owner="LeaderWorkerSet"),
    F("lws_group_size", "int", None, "-", "Pods in the group: KIMI_NODES when unset.",
      external="LWS_GROUP_SIZE", owner="LeaderWorkerSet"),
    F("lws_worker_index", "int", None, "-", "This pod's index in its group: KIMI_NODE_RANK when unset.",
      external="LWS_WORKER_INDEX", owner="LeaderWorkerSet"),
    F("slurm_nnodes", "int", None, "-", "Nodes of the job step: KIMI_NODES when unset.",
      external="SLURM_NNODES", owner="Slurm"),
    F("slurm_job_num_nodes", "int", None, "-", "Nodes of the job (when SLURM_NNODES is absent).",
      external="SLURM_JOB_NUM_NODES", owner="Slurm"),
    F("slurm_nodeid", "int", None, "-", "This node's index in the job: KIMI_NODE_RANK when unset.",
      external="SLURM_NODEID", owner="Slurm"),
    F("slurm_job_nodelist", "str", None, "-", "The job's compact host list; its first host is KIMI_HEAD_ADDR.",
      external="SLURM_JOB_NODELIST", owner="Slurm"),
    F("slurm_nodelist", "str", None, "-", "The host list (when SLURM_JOB_NODELIST is absent).",
      external="SLURM_NODELIST", owner="Slurm"),
    F("cuda_visible_devices", "str", None, "-", "GPUs the process may use (NVIDIA; AMD when HIP_VISIBLE_DEVICES is unset).",
      external="CUDA_VISIBLE_DEVICES", owner="GPU runtime"),
    F("hip_visible_devices", "str", None, "-", "GPUs the process may use (AMD).",
      external="HIP_VISIBLE_DEVICES", owner="GPU runtime"),
    F("rocr_visible_devices", "str", None, "-", "GPUs the ROCm runtime exposes (AMD), applied first.",
      external="ROCR_VISIBLE_DEVICES", owner="GPU runtime"),
    F("hf_hub_offline", "bool", False, "`0`", "1 = no hub access: the weights must be in the cache already.",
      external="HF_HUB_OFFLINE", owner="Hugging Face Hub"),
    F("hf_token", "str", None, "none", "Token for gated or private repos (`kimi-serve download`, vLLM); masked in every output.",
      external="HF_TOKEN", owner="Hugging Face Hub"),
    F("hf_endpoint", "str", None, "`https://huggingface.co`", "The hub `kimi-serve download` and vLLM fetch from (a mirror).",
      external="HF_ENDPOINT", owner="Hugging Face Hub"),
    F("vllm_use_modelscope", "bool", False, "`0`", "1 = vLLM loads from ModelScope: its cache holds the weights.",
      external="VLLM_USE_MODELSCOPE", owner="vLLM"),
    # Cloud container platforms (recipes/platforms.yaml, docs/cloud.md) and object storage.
    F("sagemaker_bind_to_port", "int", None, "-", "Port SageMaker sends traffic to (multi-container endpoints); 8080 when unset: KIMI_PORT.",
      external="SAGEMAKER_BIND_TO_PORT", owner="SageMaker"),
    F("sm_vllm_model", "str", None, "-", "Model to load (AWS's vLLM containers' convention): KIMI_MODEL when unset.",
      external="SM_VLLM_MODEL", owner="SageMaker"),
    F("hf_model_id", "str", None, "-", "Model to load (the Hugging Face containers' convention): KIMI_MODEL when unset.",
      external="HF_MODEL_ID", owner="SageMaker"),
    F("sm_vllm_flags", "str", None, "-", "`SM_VLLM_<NAME>=v` is the vLLM flag `--<name> v` (`true`: a bare flag, `false`: none), before KIMI_EXTRA_ARGS.",
      external="SM_VLLM_<NAME>", owner="SageMaker"),
    F("aip_http_port", "int", None, "-", "Port Vertex AI sends probes and predictions to: KIMI_PORT (must agree).",
      external="AIP_HTTP_PORT", owner="Vertex AI"),
    F("aip_mode", "str", None, "-", "`PREDICTION` in a serving container (detection).",
      external="AIP_MODE", owner="Vertex AI"),
    F("aip_health_route", "str", None, "-", "Route Vertex AI probes; must be one the server answers.",
      external="AIP_HEALTH_ROUTE", owner="Vertex AI"),
    F("aip_predict_route", "str", None, "-", "Route Vertex AI sends predictions to; must be one the server answers.",
      external="AIP_PREDICT_ROUTE", owner="Vertex AI"),
    F("aip_storage_uri", "str", None, "-", "gs:// copy of the model's artifacts: KIMI_MODEL when unset.",
      external="AIP_STORAGE_URI", owner="Vertex AI"),
    F("azureml_model_dir", "str", None, "-", "Where the deployment's registered model is mounted: KIMI_MODEL when unset and it holds a checkpoint.",
      external="AZUREML_MODEL_DIR", owner="Azure ML"),
    F("skypilot_num_nodes", "int", None, "-", "Nodes of the task: KIMI_NODES when unset.",
      external="SKYPILOT_NUM_NODES", owner="SkyPilot"),
    F("skypilot_node_rank", "int", None, "-", "This node's rank: KIMI_NODE_RANK when unset.",
      external="SKYPILOT_NODE_RANK", owner="SkyPilot"),
    F("skypilot_node_ips", "str", None, "-", "Node addresses, one a line, rank 0 first: the first is KIMI_HEAD_ADDR when unset.",
      external="SKYPILOT_NODE_IPS", owner="SkyPilot"),
    F("aws_endpoint_url_s3", "str", None, "-", "S3-compatible endpoint for s3:// models (else AWS_ENDPOINT_URL, else AWS).",
      external="AWS_ENDPOINT_URL_S3", owner="you (S3)"),
    F("aws_endpoint_url", "str", None, "-", "Endpoint of every AWS service, used for s3:// models.",
      external="AWS_ENDPOINT_URL", owner="you (S3)"),
    F("aws_region", "str", None, "-", "Region of the bucket (else AWS_DEFAULT_REGION, else us-east-1).",
      external="AWS_REGION", owner="you / the platform (S3)"),
    F("aws_default_region", "str", None, "-", "Region of the bucket when AWS_REGION is unset.",
      external="AWS_DEFAULT_REGION", owner="you / the platform (S3)"),
    F("aws_access_key_id", "str", None, "-", "Key id for s3:// models (masked in every output).",
      external="AWS_ACCESS_KEY_ID", owner="you / the platform (S3)"),
    F("aws_secret_access_key", "str", None, "-", "Secret key for s3:// models (masked in every output).",
      external="AWS_SECRET_ACCESS_KEY", owner="you / the platform (S3)"),
    F("aws_session_token", "str", None, "-", "Session token of temporary credentials (masked).",
      external="AWS_SESSION_TOKEN", owner="you / the platform (S3)"),
    F("aws_profile", "str", None, "-", "Named profile: preflight names it as the credential source, vLLM's loader resolves it.",
      external="AWS_PROFILE", owner="you (S3)"),
    F("aws_web_identity_token_file", "str", None, "-", "Web identity credentials (named by preflight, resolved by the loader).",
      external="AWS_WEB_IDENTITY_TOKEN_FILE", owner="EKS / the platform (S3)"),
    F("aws_container_credentials_relative_uri", "str", None, "-", "Container credentials (named by preflight, resolved by the loader).",
      external="AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", owner="ECS / the platform (S3)"),
    F("aws_container_credentials_full_uri", "str", None, "-", "Container credentials (named by preflight, resolved by the loader).",
      external="AWS_CONTAINER_CREDENTIALS_FULL_URI", owner="the platform (S3)"),
    F("aws_ec2_metadata_disabled", "str", None, "-", "`true`: no instance-metadata credentials (S3-compatible stores).",
      external="AWS_EC2_METADATA_DISABLED", owner="you (S3)"),
    F("google_application_credentials", "str", None, "-", "Service-account key file for gs:// models (else the metadata server).",
      external="GOOGLE_APPLICATION_CREDENTIALS", owner="you (GCS)"),
)
del F

BY_NAME = {f.name: f for f in FIELDS}
BY_ENV = {f.env: f for f in FIELDS}
KIMI_FIELDS = tuple(f for f in FIELDS if not f.external)
EXTERNAL_FIELDS = tuple(f for f in FIELDS if f.external)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def parse_bool(text: Any) -> Optional[bool]:
    """The one reading of a yes/no value: 1/true/yes/on, 0/false/no/off/empty; None otherwise."""
    if isinstance(text, bool):
        return text
    word = str(text).strip().lower()
    return True if word in _TRUE else False if word in _FALSE else None


@dataclass(frozen=True)
class Settings:
    """Typed settings: one attribute per field of FIELDS (added below, typed by the field's kind).
    `origin` says where each value came from."""

    values: Mapping[str, Any]
    origin: Mapping[str, str]  # field name -> "default" | "file" | "env"
    user_args: tuple = ()  # container arguments (vLLM args)
    warnings: tuple = ()

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


def _attribute(name: str) -> property:
    return property(lambda self: self.values[name], doc=BY_NAME[name].help)


for _field in FIELDS:
    setattr(Settings, _field.name, _attribute(_field.name))
    Settings.__annotations__[_field.name] = PYTHON_TYPES[_field.kind]
del _field


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
        value = parse_bool(raw)
        if value is not None:
            return value
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
    keys = [f.name for f in KIMI_FIELDS if f.name != "config"]
    unknown = [k for k in data if k not in keys]
    if unknown:
        key = unknown[0]
        raise unknown_value(f"key in KIMI_CONFIG file {path}", key, keys,
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
    for field in EXTERNAL_FIELDS:
        if field.env in environ:
            values[field.name] = _convert(field, environ[field.env], "env")
            origin[field.name] = "env"
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

    close = difflib.get_close_matches(env_name, [f.env for f in KIMI_FIELDS], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def read_external(environ: Mapping[str, str]) -> dict:
    """The variables others set (LWS_*, SLURM_*, ...) that are present, typed: {env name: value}."""
    return {f.env: _convert(f, environ[f.env], "env") for f in EXTERNAL_FIELDS if environ.get(f.env, "").strip()}


def env_flag(environ: Mapping[str, str], name: str) -> bool:
    """A declared yes/no variable others set (e.g. HF_HUB_OFFLINE), read with the one boolean parser;
    a value it cannot read counts as the default (the variable's owner decides what else it means)."""
    value = parse_bool(environ.get(name, ""))
    return BY_ENV[name].default if value is None else value


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
