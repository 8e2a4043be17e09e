"""Cache layout: one mount point (KIMI_CACHE_DIR, default /cache) holds the Hugging Face cache, vLLM's
compile cache and, with VLLM_USE_MODELSCOPE=true, ModelScope's, so a restarted container reuses
downloaded weights and compiled graphs.

These variables are added at the exec edge, never into the plan's env (which stays the recipe's).
A variable the user set is kept. HOME is moved under the cache when it is not writable: a
container run as an arbitrary non-root UID (OpenShift) has HOME=/ or a HOME it cannot write.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Mapping, Optional, Tuple

from entrypoint.core.base import limits
from entrypoint.core.base.files import walk_files
from entrypoint.core.compose.settings import env_flag


def uses_modelscope(environ: Mapping[str, str]) -> bool:
    return env_flag(environ, "VLLM_USE_MODELSCOPE")


def cache_env(cache_dir: str, environ: Mapping[str, str], compiled=None) -> dict:
    """The cache variables to add to the exec environment (those the user did not set). `compiled`
    (an engine's entrypoint.core.compose.caches.CompileCaches): its compile caches under their key, vLLM's
    own (VLLM_CACHE_ROOT) among them."""
    wanted = {"HF_HOME": f"{cache_dir}/huggingface", "VLLM_CACHE_ROOT": f"{cache_dir}/vllm"}
    if compiled is not None:
        wanted.update(compiled.paths(cache_dir))
    if uses_modelscope(environ):
        wanted["MODELSCOPE_CACHE"] = f"{cache_dir}/modelscope"
    added = {k: v for k, v in wanted.items() if k not in environ}
    home = environ.get("HOME")
    if not home or not os.access(home, os.W_OK):
        added["HOME"] = f"{cache_dir}/home" if os.access(cache_dir, os.W_OK) else "/tmp"
    return added


def effective(cache_dir: str, environ: Mapping[str, str]) -> dict:
    """The environment the launched program will see for the cache variables."""
    return {**cache_env(cache_dir, environ), **{k: v for k, v in environ.items()
                                                if k in ("HF_HOME", "HF_HUB_CACHE", "VLLM_CACHE_ROOT",
                                                         "MODELSCOPE_CACHE")}}


def model_dirs(model: str, cache_dir: str, environ: Mapping[str, str]) -> list:
    """Where the weights of `model` (a repo id or a local path) are, or would be, on this node."""
    if model.startswith("/") or model.startswith("."):
        return [Path(model)]
    env = effective(cache_dir, environ)
    if uses_modelscope(environ):
        root = Path(env["MODELSCOPE_CACHE"])
        return [root / "models" / model, root / "hub" / model]
    hub = Path(env.get("HF_HUB_CACHE") or Path(env["HF_HOME"]) / "hub")
    return [hub / ("models--" + model.replace("/", "--")) / "snapshots"]


def weights_search(model: str, cache_dir: str, environ: Mapping[str, str]) -> Tuple[Optional[Path], str]:
    """(the directory holding the model's safetensors or None, the first *.safetensors that is
    not a regular file: a FIFO, a device, a link loop; "" when none). The search is bounded in
    entries, depth and time (core/base/files.walk_files) and follows no link to a directory."""
    problem = ""
    for base in model_dirs(model, cache_dir, environ):
        try:
            if not base.is_dir():
                continue
        except OSError:  # not readable by this user: preflight's cache check says so
            continue
        walk = walk_files(base, ".safetensors", limits.MAX_WEIGHTS_ENTRIES, limits.MAX_WEIGHTS_DEPTH,
                          limits.WEIGHTS_SEARCH_DEADLINE_S)
        problem = problem or walk.problem()
        if walk.files:
            return base, problem
    return None, problem


def weights_present(model: str, cache_dir: str, environ: Mapping[str, str]) -> Optional[Path]:
    """The directory holding the model's safetensors, or None."""
    return weights_search(model, cache_dir, environ)[0]


def path_problem(path: str, want_writable: bool = False) -> str:
    """Why `path` cannot serve as a directory for this user ("" when it can or does not exist yet)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"{path} cannot be reached by this user (uid {os.getuid()}: {exc.strerror})"
    if not stat.S_ISDIR(mode):
        return f"{path} is not a directory"
    if not os.access(path, os.R_OK | os.X_OK | (os.W_OK if want_writable else 0)):
        return f"{path} is not {'writable' if want_writable else 'readable'} by this user (uid {os.getuid()})"
    return ""


def prepare(cache_dir: str, env: Mapping[str, str], compiled=None) -> None:
    """Create the cache directories that will be used (best effort: preflight reports a failure)."""
    names = ("HF_HOME", "VLLM_CACHE_ROOT", "MODELSCOPE_CACHE", "HOME") + tuple(n for n, _ in getattr(compiled, "env", ()))
    for key in names:
        if key in env and str(env[key]).startswith(cache_dir.rstrip("/") + "/"):
            try:
                os.makedirs(env[key], exist_ok=True)
            except OSError:
                pass


WARM_PROBE_ENTRIES = 10000  # directory entries looked at, at most: a warm cache shows itself in the first few


def _files_under(path: str, budget: int) -> int:
    """Regular files under `path` (0 when it is missing), looking at no more than `budget` entries."""
    count, stack = 0, [path]
    while stack and budget > 0:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    budget -= 1
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        count += 1
                    if budget <= 0:
                        break
        except OSError:
            continue
    return count


def compile_cache_state(cache_dir: str, environ: Mapping[str, str], compiled) -> dict:
    """{variable: files found} for each compile cache this launch uses (the user's own path where
    they set one): what `doctor` reports as a warm or a cold start."""
    paths = {**compiled.paths(cache_dir), **{k: environ[k] for k, _ in compiled.env if environ.get(k)}}
    return {name: _files_under(path, WARM_PROBE_ENTRIES) for name, path in paths.items()}

