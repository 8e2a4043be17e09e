"""Pydantic models of recipes/fleet.yaml: the router in front of a fleet's replicas (core/compose/fleet.py).

Every model rejects unknown keys; nothing here decides a launch.
"""

from __future__ import annotations

from typing import Any, Dict, List

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Policy(Strict):
    description: str
    tuned: bool = False  # the store router's cache-aware tuning applies
    # the fleet's own values for some of those options (flag -> value), measured by benchmarks/fleet.py
    tuning: Dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _tuning_needs_tuned(self):
        if self.tuning and not self.tuned:
            raise ValueError("tuning replaces values of the store router's tuning: set tuned: true")
        return self
    kv_events: bool = False  # the engines publish KV events, the router subscribes
    token_ids: bool = False  # the router asks the engines for the prompt's token ids (token_ids_args)
    min_replicas: int = Field(default=1, ge=1)


class KvEvents(Strict):
    port: int = Field(gt=0, lt=65536)
    config: Dict[str, Any]  # vLLM's KVEventsConfig
    default_block_size: int = Field(gt=0)


class Rbac(Strict):
    api_groups: List[str]
    resources: List[str]
    verbs: List[str]


class Discovery(Strict):
    flag: str
    selector_flag: str
    namespace_flag: str
    port_flag: str
    rbac: Rbac
    pd: "PdDiscovery"


class PdDiscovery(Strict):
    """A PD fleet's discovery: one selector per pool, one port for every pool's pods."""
    selector_flags: Dict[str, str]  # role -> the router's flag
    engine_port_flag: str  # vLLM's flag that puts every pool on the discovery port


Discovery.model_rebuild()


class Metrics(Strict):
    port: int = Field(gt=0, lt=65536)
    path: str
    args: List[str]


class Picker(Strict):
    image: str
    uid: int = Field(gt=0)
    args: List[str]
    pool_args: Dict[str, str]
    config_flag: str
    config_dir: str
    config_file: str
    ports: Dict[str, int]
    health_service: str
    termination_grace_s: int = Field(gt=0)
    resources: Dict[str, int]
    config: Dict[str, Any]  # the picker's EndpointPickerConfig
    rbac: List[Rbac]


class Gateway(Strict):
    api_version: str
    failure_mode: str
    picker: Picker


class Shedding(Strict):
    flag: str  # vLLM's in-flight bound (503 beyond it), where the release's grammar has it
    factor: int = Field(ge=1)  # x the engine's --max-num-seqs
    default_max_num_seqs: int = Field(ge=1)  # vLLM's own default where the launch sets none


class Streams(Strict):
    """The stream front before the fleet's router (entrypoint/front)."""
    program: List[str]
    router_host: str
    router_port: int = Field(gt=0, lt=65536)
    migrations: int = Field(ge=0, le=100)
    engine_args: List[str]


class FleetFile(Strict):
    router_of: str  # the KV store (recipes/kv_offload.yaml) whose router the fleet runs
    default_policy: str
    policies: Dict[str, Policy]
    token_ids_args: List[str]
    kv_events: KvEvents
    discovery: Discovery
    router_fault_args: List[str]  # health checks, retries, circuit breaker
    shedding: Shedding
    streams: Streams
    metrics: Metrics
    gateway: Gateway

    @model_validator(mode="after")
    def _default_known(self):
        if self.default_policy not in self.policies:
            raise ValueError(f"default_policy {self.default_policy!r} is not one of the policies")
        if str(self.metrics.port) not in self.metrics.args:
            raise ValueError("metrics.args must bind metrics.port")
        return self
