"""Which repositories and files a launch loads, read from its plan (pure).

The model argument and `--revision` of the vLLM argv, the Eagle3 draft model of
`--speculative-config` (its own `revision` key: vLLM gives the draft model the speculative
config's revision, never the target's, and the target's tokenizer) and a `--tokenizer` repo
other than the model. Which files of each: the recipe's `model.files` rules (what vLLM reads
from a safetensors checkpoint repo), applied to the hub's file listing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Iterable, List, Optional

from entrypoint.core.compose.plan import Plan

DEFAULT_REVISION = "main"


@dataclass(frozen=True)
class Source:
    repo_id: str
    revision: str
    purpose: str  # "model" | "draft model" | "tokenizer"
    weights: bool = True  # False: only the top-level files (config, tokenizer)

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.revision}"


def is_local_path(model: str) -> bool:
    """A path or an object-storage URI (s3://, gs://): not a hub repository."""
    return model.startswith(("/", ".", "~")) or "://" in model


def _draft(found) -> Optional[Source]:
    raw = found.text("speculative_config")
    if not raw:
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        return None  # vLLM itself rejects it at start; nothing to fetch
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, str) or not model or is_local_path(model):
        return None
    return Source(model, str(config.get("revision") or DEFAULT_REVISION), "draft model")


def sources(plan: Plan) -> List[Source]:
    """The hub repositories the launch reads (local paths are left out: nothing to fetch)."""
    proc = plan.first_engine
    if proc is None:
        return []
    args, model = proc.engine, proc.model
    assert model is not None, "an engine serves a model (plan.engine)"
    revision = args.text("revision") or DEFAULT_REVISION
    found = [] if is_local_path(model) else [Source(model, revision, "model")]
    draft = _draft(args)
    if draft is not None:
        found.append(draft)
    tokenizer = args.text("tokenizer")
    if tokenizer and tokenizer != model and not is_local_path(tokenizer):
        found.append(Source(tokenizer, args.text("tokenizer_revision") or revision, "tokenizer",
                            weights=False))
    return found


def select_files(paths: Iterable[str], rules, weights: bool = True) -> List[str]:
    """The repo files vLLM reads, of `paths` (the hub's listing), by the recipe's `model.files`
    rules, at the repo's top only (vLLM globs its snapshot folder, not below): the files of the
    first weights pattern the repo has, as vLLM picks it, and every `top_level` match."""
    top = sorted(p for p in paths if "/" not in p)
    chosen = {p for p in top if any(fnmatch(p, pat) for pat in rules.top_level)}
    if weights:
        for pattern in rules.weights:
            matched = [p for p in top if fnmatch(p, pattern)]
            if matched:
                chosen.update(matched)
                break
    return sorted(chosen)


def exact_pattern(path: str) -> str:
    """An fnmatch pattern matching exactly `path` (the hub filters allow_patterns with fnmatch)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in path)
