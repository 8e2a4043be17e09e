"""Pydantic models of recipes/platforms.yaml: the cloud container platforms' contracts and offerings.

Every model rejects unknown keys; `recipe_schema.Catalog` checks that offerings name known
hardware. The loader (`entrypoint.core.data.recipe`) validates it with the rest of the recipe data and
caches the result. Nothing here decides a launch.
"""

from __future__ import annotations

from typing import Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

class Detect(Strict):
    args: List[str] = []  # container arguments the platform passes (consumed, never given to vLLM)
    env: List[str] = []  # variables only this platform sets (any one of them is enough)


class Binding(Strict):
    env: List[str] = []  # platform variables carrying the value, first set wins
    value: Optional[str] = None  # the contract's value when none is set
    binding: Literal["contract", "default"]


class Route(Strict):
    path: str = Field(pattern=r"^/")  # the route the renderers give and the server must answer
    env: Optional[str] = None  # the platform variable that names it at run time


class Cluster(Strict):
    nodes_env: str
    rank_env: str
    head_list_env: str  # whitespace/newline separated node addresses, rank 0 first


class Offering(Strict):
    instance_type: Optional[str] = None  # SageMaker, Azure ML
    machine_type: Optional[str] = None  # Vertex AI
    accelerator_type: Optional[str] = None
    accelerator_count: Optional[int] = Field(default=None, gt=0)
    accelerators: Optional[str] = Field(default=None, pattern=r"^[A-Za-z0-9-]+:\d+$")  # SkyPilot NAME:COUNT
    local_storage_gb: Optional[int] = Field(default=None, gt=0)  # instance storage the platform mounts


class Platform(Strict):
    display_name: str
    detect: Detect
    contract: Dict[Literal["port", "host", "model"], Binding] = {}
    routes: Dict[Literal["health", "predict"], Route]
    model_dir: Optional[str] = None
    model_dir_env: Optional[str] = None
    flag_prefix: Optional[str] = None
    flag_prefix_skip: List[str] = []
    cluster: Optional[Cluster] = None
    max_volume_gb: Optional[int] = Field(default=None, gt=0)
    shared_memory_mb: Optional[int] = Field(default=None, gt=0)
    offerings: Dict[str, Offering]


class ObjectStore(Strict):
    display_name: str
    endpoint_env: List[str] = []
    region_env: List[str] = []
    default_region: Optional[str] = None
    key_env: List[str] = []  # the id and secret of a signed request (empty: none)
    session_env: Optional[str] = None
    other_credentials_env: List[str] = []
    metadata_disabled_env: Optional[str] = None
    metadata_url: str
    default_endpoint: str


class ObjectStorage(Strict):
    load_format: str
    schemes: Dict[str, ObjectStore]


class PlatformsFile(Strict):
    served_routes: List[str]
    object_storage: ObjectStorage
    platforms: Dict[str, Platform]

    @model_validator(mode="after")
    def _routes_served(self):
        for pid, platform in self.platforms.items():
            for kind, route in platform.routes.items():
                if route.path not in self.served_routes:
                    raise ValueError(f"platform {pid}: {kind} route {route.path} is not one the server answers")
        return self
