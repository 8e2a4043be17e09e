"""Pydantic model of recipes/vllm/preload.yaml: what each vLLM release's `vllm preload` takes
(read from vLLM itself), and where kimi-serve puts its sockets. Every model rejects unknown keys.
Nothing here decides (core/compose/preload.py does)."""

from __future__ import annotations

from typing import Dict, List, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PreloadRelease(Strict):
    provenance: str
    program: List[str] = Field(min_length=1)
    model_option: str
    engine_load_format: str
    engine_extra_config_option: str
    engine_socket_key: str
    socket_dir_option: str
    health_port_option: str
    health_path: str = Field(pattern=r"^/")
    platforms: List[str]
    brands: List[str]  # GPU brands (recipes/hardware.yaml brands) whose platform vLLM accepts
    refused_deploy_types: List[Literal["single_node", "multi_node", "pd_cluster"]] = []
    serve_only_options: List[str]  # `vllm serve` options the preload parser lacks


class Resources(Strict):
    cpu: int = Field(gt=0)
    memory_gib: int = Field(gt=0)


class PreloadFile(Strict):
    releases: Dict[str, PreloadRelease]
    socket_volume: str = Field(pattern=r"^/")
    socket_dir: str = Field(pattern=r"^/")
    health_port: int = Field(ge=1, le=65535)
    resources: Resources
