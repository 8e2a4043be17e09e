"""Test-only vLLM general plugin: MoE expert and data parallelism on vLLM's CPU backend.

vllm-cpu 0.32.0 cannot serve a MoE model (the tiny Kimi-K2 of tests/verify/tiny_models.py) with
expert parallelism or data parallelism > 1. This plugin patches two gaps, in every vLLM process
(API server, engine core, workers), and only when vLLM's platform is CPU. Both patches are to be
dropped when vLLM fixes the gap; neither is a serving fix, they exist so tests can run the DEP/TEP
shapes at toy scale without a GPU.

1. vllm/model_executor/layers/fused_moe/experts/cpu_moe.py, CPUUnquantizedExperts.apply (line 269;
   the kernel call cpu_fused_moe at line 303, likewise the other experts' apply in that file):
   the `expert_map` argument (global expert id -> local slot, -1 where another rank holds the
   expert) is ignored, so with `--enable-expert-parallel` and 2 ranks the kernel indexes the
   local weights with global ids: it reads past them (a segfault or silently wrong tokens).
   Patch: map topk_ids through expert_map, route non-local ids to slot 0 with weight 0.
2. vllm/distributed/device_communicators/base_device_communicator.py, all_gatherv (line 290) and
   reduce_scatterv (line 331) raise NotImplementedError, and cpu_communicator.py's
   CpuCommunicator (line 20) does not override them; with `--data-parallel-size 2` on a MoE
   model the all-gather/reduce-scatter all2all manager (all2all.py, AgRsAll2AllManager.dispatch
   and .combine, lines 148 and 172; CPU always uses it: cpu_communicator.py line 68) calls them
   on the first request. Patch: a padded all-gather + slice, and an all-reduce + slice, over
   the group (gloo for DP).

3. vllm/v1/worker/cpu_model_runner.py, CPUModelRunner.warming_up_model (line 84): with
   --enforce-eager (compilation mode NONE) it returns before profile_run, the only CPU path that
   allocates `intermediate_tensors` (gpu_model_runner.py line 5802, in _dummy_run); so with
   pipeline parallelism every stage after the first fails its first request in
   sync_and_gather_intermediate_tensors (gpu_model_runner.py line 3174: `assert
   self.intermediate_tensors is not None`). Patch: allocate them there first, as _dummy_run would.

Harmless with a dense model (no MoE layer calls either path) and on other platforms (no-op).
Patch 2 applies only while CpuCommunicator still lacks the methods; patch 1 hands the kernel
local ids and expert_map=None, which stays right if vLLM starts honouring the map.

Activate it either way (vLLM loads entry points of group `vllm.general_plugins`):
  - `pip install -e tests/live/vllm_cpu_plugin` into vLLM's venv, or
  - without installing: `PYTHONPATH=tests/live/vllm_cpu_plugin` (that folder holds the module and
    a kimi_vllm_cpu_fixes-0.1.0.dist-info carrying the entry point; it travels to the engine
    and worker processes through the environment).
Where VLLM_PLUGINS is set it must name kimi_vllm_cpu_fixes (VLLM_PLUGINS=none turns it off).
The engine and worker logs say "kimi_vllm_cpu_fixes: patched ..." in each process patched.
"""

from __future__ import annotations

import functools
import inspect
import logging

import torch

logger = logging.getLogger("vllm.kimi_vllm_cpu_fixes")
_MARK = "_kimi_vllm_cpu_fixes"


def register() -> None:
    """The entry point: vLLM calls it once per process."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    patched = [*_patch_expert_map(), *_patch_variable_collectives(), *_patch_eager_pipeline()]
    if patched:
        logger.info("kimi_vllm_cpu_fixes: patched %s", ", ".join(patched))


# --- 1. expert map in the CPU MoE experts -------------------------------------------------------

def _local_expert_ids(apply):
    signature = inspect.signature(apply)

    @functools.wraps(apply)
    def wrapper(*args, **kwargs):
        call = signature.bind(*args, **kwargs)
        expert_map = call.arguments.get("expert_map")
        if expert_map is not None:
            topk_ids = call.arguments["topk_ids"]
            local = expert_map[topk_ids.long()]
            here = local >= 0
            call.arguments["topk_ids"] = local.clamp(min=0).to(topk_ids.dtype)
            call.arguments["topk_weights"] = call.arguments["topk_weights"] * here
            if call.arguments.get("apply_router_weight_on_input"):  # top-1: weight already applied
                call.arguments["hidden_states"] = call.arguments["hidden_states"] * here
            call.arguments["expert_map"] = None
        return apply(*call.args, **call.kwargs)

    setattr(wrapper, _MARK, True)
    return wrapper


def _patch_expert_map() -> list[str]:
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe
    from vllm.model_executor.layers.fused_moe.modular_kernel import FusedMoEExperts

    done = []
    for name, cls in vars(cpu_moe).items():
        apply = vars(cls).get("apply") if isinstance(cls, type) else None
        if apply is None or not issubclass(cls, FusedMoEExperts) or getattr(apply, _MARK, False):
            continue
        if "expert_map" not in inspect.signature(apply).parameters:
            continue
        cls.apply = _local_expert_ids(apply)
        done.append(f"{name}.apply")
    return done


# --- 2. variable-size gather / scatter in the CPU communicator ----------------------------------

def _all_gatherv(self, input_, dim: int = 0, sizes: list[int] | None = None):
    if isinstance(input_, (list, tuple)):
        return [_all_gatherv(self, t, dim, sizes) for t in input_]
    if dim != 0:
        raise NotImplementedError("only dim 0 all-gatherv is supported")
    if sizes is None:
        return self.all_gather(input_, 0)
    assert len(sizes) == self.world_size and input_.shape[0] == sizes[self.rank_in_group]
    most = max(sizes)
    padded = input_.new_zeros((most, *input_.shape[1:]))
    padded[: input_.shape[0]] = input_
    gathered = self.all_gather(padded, 0)  # world_size * most rows
    return torch.cat([gathered[r * most : r * most + n] for r, n in enumerate(sizes)])


def _reduce_scatterv(self, input_, dim: int = -1, sizes: list[int] | None = None):
    dim = dim % input_.dim()
    rows = input_.movedim(dim, 0).clone(memory_format=torch.contiguous_format)  # all_reduce: in place
    if sizes is None:
        assert rows.shape[0] % self.world_size == 0
        sizes = [rows.shape[0] // self.world_size] * self.world_size
    assert len(sizes) == self.world_size and rows.shape[0] == sum(sizes)
    total = self.all_reduce(rows)
    start = sum(sizes[: self.rank_in_group])
    return total[start : start + sizes[self.rank_in_group]].movedim(0, dim).contiguous()


def _patch_variable_collectives() -> list[str]:
    from vllm.distributed.device_communicators.base_device_communicator import DeviceCommunicatorBase
    from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator

    done = []
    for name, fix in (("all_gatherv", _all_gatherv), ("reduce_scatterv", _reduce_scatterv)):
        if getattr(CpuCommunicator, name) is getattr(DeviceCommunicatorBase, name):  # still the gap
            setattr(CpuCommunicator, name, fix)
            done.append(f"CpuCommunicator.{name}")
    return done


# --- 3. pipeline stages' intermediate tensors without a warm-up run --------------------------------

def _patch_eager_pipeline() -> list[str]:
    from vllm.distributed.parallel_state import get_pp_group
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    gather = CPUModelRunner.sync_and_gather_intermediate_tensors
    if getattr(gather, _MARK, False):
        return []

    @functools.wraps(gather)
    def allocated_first(self, *args, **kwargs):
        if self.intermediate_tensors is None and not get_pp_group().is_first_rank:
            self.intermediate_tensors = self.model.make_empty_intermediate_tensors(
                batch_size=self.max_num_tokens, dtype=self.model_config.dtype, device=self.device)
        return gather(self, *args, **kwargs)

    setattr(allocated_first, _MARK, True)
    CPUModelRunner.sync_and_gather_intermediate_tensors = allocated_first
    return ["CPUModelRunner.sync_and_gather_intermediate_tensors"]
