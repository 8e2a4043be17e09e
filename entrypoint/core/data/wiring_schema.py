"""Pydantic model of recipes/vllm/wiring.yaml: the `vllm serve` destinations that change a
deployment's world size, processes, ports or wiring, which the user's vLLM arguments may not set
(and the look-alikes left to the user, each with its reason). Nothing here decides
(core/vllm/vllm_cli.py refused_dests does)."""

from __future__ import annotations

from typing import Dict, Optional

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Refused(Strict):
    setting: Optional[str] = Field(default=None, min_length=1)  # the typed setting that owns it
    why: str = Field(min_length=1)  # what would go wrong: ends the refusal


class WiringFile(Strict):
    refused: Dict[str, Refused]
    allowed: Dict[str, str]
