"""The weights' volume: file system type from the mount table, GPUDirect Storage, the bounded
read sample of one weights file, the loaders this Python can run, and the load_time node check
(expected load time with this launch's loader and with the best one)."""

from __future__ import annotations

import dataclasses
import time


from entrypoint.app.launch import build
from entrypoint.core.base import limits
from entrypoint.core.compose import loading
from entrypoint.core.compose.loading import StorageFacts
from entrypoint.core.data.record import Record
from entrypoint.node import storage
from entrypoint.node.preflight import run_checks
from tests.runtime.test_preflight import facts

MIB = 1024 * 1024


def mounts(tmp_path, point, fstype):
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "mounts").write_text(f"/dev/vda / ext4 rw 0 0\nserver:/export {point} {fstype} rw 0 0\n")
    return str(proc)


def weights(tmp_path, sizes):
    model = tmp_path / "model"
    model.mkdir()
    for i, size in enumerate(sizes):
        (model / f"model-{i:05d}.safetensors").write_bytes(b"\x01" * size)
    return model


def probe(model, tmp_path, fstype="nfs4", sample=True, gds=False):
    gds_path = tmp_path / "nvidia-fs"
    if gds:
        gds_path.write_text("")
    else:
        gds_path.unlink(missing_ok=True)
    data = loading.load_data()
    storage_facts = Record("Storage", {**data.storage._fields, "gds_driver": str(gds_path)})  # read-only data
    data = Record("LoadersFile", {**data._fields, "storage": storage_facts})
    return storage.probe(str(model), str(tmp_path / "cache"), {}, data, sample=sample,
                         proc_root=mounts(tmp_path, str(model), fstype))


def test_the_sample_reads_the_largest_weights_file_and_says_how(tmp_path):
    model = weights(tmp_path, [1 * MIB, 3 * MIB])
    found = probe(model, tmp_path)
    assert found.fstype == "nfs4" and loading.storage_kind(found) == "network"
    assert found.sample_bytes == 3 * MIB and found.sample_gbps > 0 and found.note == "the file ended first"
    assert found.installed is not None and "safetensors" in found.installed


def test_gds_needs_the_driver_and_a_local_file_system(tmp_path):
    model = weights(tmp_path, [MIB])
    assert loading.storage_kind(probe(model, tmp_path, "xfs", gds=True)) == "local_gds"
    assert loading.storage_kind(probe(model, tmp_path, "xfs", gds=False)) == "local"


def test_the_sample_is_bounded_in_bytes_and_time(tmp_path):
    path = weights(tmp_path, [64 * MIB]) / "model-00000.safetensors"
    n, _seconds, _, note = storage.sample_read(path, max_bytes=16 * MIB)
    assert n == 16 * MIB and note == ""
    start = time.monotonic()
    n, _seconds, _, note = storage.sample_read(path, deadline_s=0.0)
    assert n == limits.LOAD_SAMPLE_BLOCK and "bound" in note and time.monotonic() - start < 5
    assert limits.LOAD_SAMPLE_BYTES <= 1024 * MIB and limits.LOAD_SAMPLE_DEADLINE_S <= 10


def test_no_weights_yet_and_object_storage(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    found = probe(empty, tmp_path, "ext4")
    assert found.sample_bytes == 0 and "no weights on the node yet" in found.note and found.fstype == "ext4"
    assert storage.probe("s3://bucket/kimi", "/cache", {}, loading.load_data()).object_store


def test_an_unreadable_file_is_a_note_not_a_traceback(tmp_path):
    n, _, _, note = storage.sample_read(tmp_path / "missing.safetensors")
    assert n == 0 and "cannot read" in note


# ------------------------------------------------------------------------- the node check


def check(env, node_storage):
    launch = build({"KIMI_HARDWARE": "h200", "KIMI_VLLM_VERSION": "0.33.0", **env})
    proc = launch.this_process()
    _, results = run_checks(launch, proc, {}, dataclasses.replace(facts(), storage=node_storage))
    return {r.name: r for r in results}["load_time"]


def fast_local(**kw):
    return StorageFacts(path="/cache", fstype="ext4", installed=("safetensors", "runai_streamer", "instanttensor",
                                                                   "fastsafetensors"),
                        sample_bytes=256 * MIB, sample_s=0.14, sample_direct=True, **kw)


def test_doctor_reports_the_expected_time_and_the_best_loader():
    result = check({}, fast_local())
    assert result.status == "ok"
    msg = result.message
    assert "ext4 (local storage; GPUDirect Storage not usable)" in msg and "O_DIRECT" in msg
    assert "595 GB of the 595 GB checkpoint" in msg and "with safetensors" in msg
    assert "with runai_streamer, the best loader here" in msg and "KIMI_LOAD_FORMAT=auto picks it" in msg
    assert "Start-up budget 3600 s" in msg


def test_a_multi_node_share_and_the_chosen_loader():
    env = {"KIMI_NODES": "2", "KIMI_STRATEGY": "multi_node_tp", "KIMI_HEAD_ADDR": "10.0.0.1", "KIMI_IFACE": "eth0",
           "KIMI_LOAD_FORMAT": "runai_streamer"}
    msg = check(env, fast_local()).message
    assert "reads 298 GB of the 595 GB checkpoint" in msg and "runai_streamer is the best loader here" in msg


def test_a_slow_volume_under_the_recipe_budget_is_a_warning_with_a_way_out():
    slow = StorageFacts(path="/cache", fstype="nfs4", installed=("safetensors",), sample_bytes=16 * MIB, sample_s=1.0)
    result = check({}, slow)
    assert result.status == "warning" and "exceed it" in result.message and "KIMI_LOAD_FORMAT=auto" in result.message


def test_the_router_and_an_unprobed_node_are_skipped():
    assert check({}, None).status == "skipped"
