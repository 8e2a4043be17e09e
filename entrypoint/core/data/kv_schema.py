"""Pydantic models of recipes/kv_offload.yaml: the KV Offload options and the KV-store deployments.

Every model rejects unknown keys. `entrypoint.core.compose.kv` loads the file (only when a launch asks for
KV offload), validates it here and composes it onto the serving plan; nothing here decides a launch.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

Args = List[str]
Env = Dict[str, str]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Resources(Strict):
    cpu: int = Field(gt=0)
    memory_gib: int = Field(gt=0)


class Companion(Strict):
    role: str  # the process's role in the plan (KIMI_ROLE)
    description: str
    argv: Args
    bind_args: Args = []  # the project's own: where the server listens (appended)
    ports: Dict[Literal["mp", "http"], int]  # mp: what the engine connects to (its health check's port)
    resources: Resources


class Option(Strict):
    """One taxonomy.kv_offload option: args (+ env) onto every vLLM process of the strategy."""

    display_name: str
    description: str
    host_memory: str  # what it costs in host memory, for people (docs/kv-cache.md)
    connectors: List[str]  # vLLM KV connectors the args name (checked against vLLM's registry)
    args: Args
    env: Env = {}
    strategies: Optional[List[str]] = None  # allowlist; None = every serving strategy
    brands: Optional[List[str]] = None  # allowlist of hardware brands; None = every brand
    requires_opt_in: bool = False  # fail-closed: only where the recipe's kv_offload_support says verified
    min_vllm_version: Optional[str] = None
    install: Optional[str] = None  # the pip requirement of the companion
    modules: List[str] = []  # Python packages the engine imports for the connector (preflight)
    companion: Optional[Companion] = None


class Router(Strict):
    program: str
    policy: str
    port: int = Field(gt=0, le=65535)
    workers_arg: str
    args: Args = []
    resources: Resources


class Master(Strict):
    argv: Args
    port: int = Field(gt=0, le=65535)
    resources: Resources


class Store(Strict):
    argv: Args
    file: str  # file name under files_dir
    port: int = Field(gt=0, le=65535)  # its REST API
    config: Dict[str, Any]  # the recipe's store config, placeholders in its string values
    start_config: Dict[str, Any] = {}  # what the real store service needs beyond the recipe's
    resources: Resources


class VllmConfig(Strict):
    file: str
    template: Dict[str, Any]


class VllmPart(Strict):
    args: Args
    env: Env = {}


class KvStore(Strict):
    """One kv_store/*.yaml deployment: master (+ store), N instances, a cache-aware router."""

    display_name: str
    description: str
    host_memory: str
    min_vllm_version: str
    default_instances: int = Field(ge=1)
    brands: List[str]
    connectors: List[str]
    install: Dict[str, str]  # brand -> pip requirement of Mooncake's transfer engine
    modules: List[str]  # Python packages the engine imports for the connector (preflight)
    vllm: VllmPart
    pd: Dict[Literal["prefill", "decode"], Args]
    router: Router
    master: Master
    store: Optional[Store] = None  # centralized only
    vllm_config: VllmConfig

    @model_validator(mode="after")
    def _brands_install(self):
        missing = [b for b in self.brands if b not in self.install]
        if missing:
            raise ValueError(f"no install for brand(s) {missing}")
        return self


class KvFile(Strict):
    files_dir: str = Field(pattern=r"^/")
    options: Dict[str, Option]
    stores: Dict[str, KvStore]

    @model_validator(mode="after")
    def _distinct_ids(self):
        both = set(self.options) & set(self.stores)
        if both:
            raise ValueError(f"ids both an option and a store: {sorted(both)}")
        return self
