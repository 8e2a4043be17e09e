"""`kimi-serve download` with the real huggingface_hub client against the Hub stand-in."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from download_env import DRAFT_ID
from tests.conftest import IN_CI
from hub_standin import EXTRA_NOT_READ, layout

SHARD_2 = "model-00002-of-000004.safetensors"
SHARD_3 = "model-00003-of-000004.safetensors"


def _clean(result: subprocess.CompletedProcess) -> str:
    out = result.stdout + result.stderr
    assert "Traceback" not in out, out
    return out


def _same_bytes(env, repo, paths):
    for path in paths:
        assert (env.snapshot(repo) / path).read_bytes() == repo.files[path], path


@pytest.mark.slow
def test_full_download_fetches_exactly_the_files_vllm_reads(env, hub, repos):
    main, wanted, draft = repos
    result = env.run("download")
    out = _clean(result)
    assert result.returncode == 0, out
    assert env.fetched(main) == wanted
    assert env.fetched(draft) == ["config.json", "model.safetensors"]
    _same_bytes(env, main, wanted)
    not_read = [p for p, read in layout().items() if not read] + list(EXTRA_NOT_READ)
    for path in not_read:
        assert hub.gets(path) == 0 and ("HEAD", main.repo_id, path) not in hub.requests, path
    assert ("GET", DRAFT_ID, "README.md") not in hub.requests
    assert "download: " in out and "(100%)" in out and "22/22 files" not in out  # 19 + 2 files
    assert f"{len(wanted) + 2}/{len(wanted) + 2} files" in out


@pytest.mark.slow
def test_spec_decoding_off_fetches_no_draft_model(env, hub, repos):
    main, wanted, _ = repos
    result = env.run("download", KIMI_FEATURES="-spec_decoding")
    assert result.returncode == 0, _clean(result)
    assert env.fetched(main) == wanted
    assert not any(repo == DRAFT_ID for _, repo, _ in hub.requests)


@pytest.mark.slow
def test_json_progress_lines(env, repos):
    result = env.run("download", KIMI_LOG_FORMAT="json")
    assert result.returncode == 0, _clean(result)
    records = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert len(records) == len([line for line in result.stderr.splitlines() if line.strip()])
    done = [r for r in records if r["event"] == "download.done"]
    assert done and done[0]["bytes"] == done[0]["total_bytes"] > 0 and "rate_bytes_s" in done[0]


@pytest.mark.slow
def test_second_run_fetches_nothing(env, hub, repos):
    _main, _wanted, _ = repos
    assert env.run("download").returncode == 0
    before = sum(hub.bodies_done.values())
    result = env.run("download")
    assert result.returncode == 0, _clean(result)
    assert sum(hub.bodies_done.values()) == before
    assert "0 to fetch" in result.stderr


@pytest.mark.slow
def test_sigterm_then_resume_fetches_only_what_was_missing(env, hub, repos):
    main, wanted, _draft = repos
    hub.behaviour.hold.add(SHARD_3)
    proc = env.popen("download", "--workers", "2")
    deadline = time.monotonic() + 60
    others = [p for p in wanted if p != SHARD_3]
    while env.fetched(main) != others and time.monotonic() < deadline:  # in place on disk
        time.sleep(0.05)
    assert env.fetched(main) == others
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert "interrupted" in err and "resume" in err
    assert (env.snapshot(main) / SHARD_3).exists() is False

    hub.behaviour.hold.clear()
    hub.behaviour.released.set()
    result = env.run("download")
    out = _clean(result)
    assert result.returncode == 0, out
    assert "removed" in out  # the killed run's partial file, which the hub library never reuses
    assert env.fetched(main) == wanted
    _same_bytes(env, main, wanted)
    assert hub.gets(SHARD_3) == 2
    assert all(hub.gets(p) == 1 for p in others), {p: hub.gets(p) for p in others}
    assert not list((env.repo_dir(main.repo_id) / "blobs").glob("*.incomplete"))


@pytest.mark.slow
def test_transient_errors_are_retried(env, hub, repos):
    main, wanted, _ = repos
    hub.behaviour.reset_once.add(SHARD_2)  # the hub library resumes this one itself
    hub.behaviour.unavailable_once.add(SHARD_3)  # this one it gives up on: kimi-serve retries
    # the cut connection is noticed by the hub library's read timeout (10 s by default): 2 s here
    result = env.run("download", HF_HUB_DOWNLOAD_TIMEOUT="2")
    out = _clean(result)
    assert result.returncode == 0, out
    assert "retry 1 of" in out and "503" in out
    _same_bytes(env, main, wanted)
    assert hub.gets(SHARD_2) == 2 and hub.gets(SHARD_3) == 2


def _corrupt(path):
    blob = path.resolve()
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))


@pytest.mark.slow
def test_verify_catches_a_corrupted_file_and_repair_fetches_it(env, hub, repos):
    main, wanted, _ = repos
    assert env.run("download").returncode == 0
    assert env.run("download", "--verify").returncode == 0
    _corrupt(env.snapshot(main) / SHARD_2)
    _corrupt(env.snapshot(main) / "config.json")
    result = env.run("download", "--verify")
    out = _clean(result)
    assert result.returncode == 1, out
    assert SHARD_2 in out and "sha256" in out
    assert "config.json" in out and "git sha1" in out
    repaired = env.run("download", "--verify", "--repair")
    assert repaired.returncode == 0, _clean(repaired)
    _same_bytes(env, main, wanted)
    assert env.run("download", "--verify").returncode == 0


@pytest.mark.slow
def test_verify_offline_uses_the_listing_cached_at_download(env, hub, repos):
    main, _, _ = repos
    assert env.run("download").returncode == 0
    dead = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "1"}
    result = env.run("download", "--verify", **dead)
    assert result.returncode == 0, _clean(result)
    _corrupt(env.snapshot(main) / SHARD_3)
    result = env.run("download", "--verify", **dead)
    assert result.returncode == 1 and SHARD_3 in _clean(result)


@pytest.mark.slow
def test_gated_repo_without_a_token(env, hub, repos):
    main, _, _ = repos
    main.gated = True
    result = env.run("download")
    out = _clean(result)
    assert result.returncode == 2, out
    assert "gated" in out and "HF_TOKEN is not set" in out and main.repo_id in out
    wrong = env.run("download", HF_TOKEN="hf_wrong_token_123456")
    out = _clean(wrong)
    assert wrong.returncode == 2 and "no access" in out and "hf_wrong_token_123456" not in out
    right = env.run("download", HF_TOKEN=hub.behaviour.token, KIMI_LOG_FORMAT="json")
    out = _clean(right)
    assert right.returncode == 0, out
    assert hub.behaviour.token not in out


def test_missing_revision(env, hub, repos):
    result = env.run("download", KIMI_MODEL_REVISION="v9.9")
    out = _clean(result)
    assert result.returncode == 2 and "'v9.9' does not exist" in out and "KIMI_MODEL_REVISION" in out


@pytest.mark.slow
def test_pinned_commit_is_downloaded_and_launched(env, hub, repos):
    main, wanted, _ = repos
    result = env.run("download", KIMI_MODEL_REVISION=main.commit)
    assert result.returncode == 0, _clean(result)
    assert env.fetched(main) == wanted
    printed = env.run("print", "--format", "json", KIMI_MODEL_REVISION=main.commit)
    argv = json.loads(printed.stdout)["argv"]
    assert argv[argv.index("--revision") + 1] == main.commit


def _mount_wrapper():
    """A command prefix that runs the rest in a private mount namespace where it may mount a tmpfs:
    as root, unprivileged (a user namespace), or through passwordless sudo (CI runners)."""
    candidates = [["unshare", "--user", "--map-root-user", "--mount"], ["sudo", "-n", "-E", "unshare", "--mount"]]
    if os.geteuid() == 0:
        candidates.insert(0, ["unshare", "--mount"])
    for prefix in candidates:
        if shutil.which(prefix[0]) is None:
            continue
        probe = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True)
        if probe.returncode == 0:
            return prefix
    return None


def test_full_disk_is_found_before_the_download(env, hub, repos, tmp_path):
    prefix = _mount_wrapper()
    if prefix is None:
        message = "needs unshare (util-linux) with root, user namespaces or passwordless sudo to mount a small tmpfs"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    env.cache.mkdir()
    mount = [*prefix, "sh", "-c", f'mount -t tmpfs -o size=128k tmpfs "{env.cache}" && exec "$@"', "sh"]
    result = env.run("download", wrap=mount)
    out = _clean(result)
    assert result.returncode == 2, out
    assert "free" in out and "larger volume" in out
    assert sum(hub.bodies_done.values()) == 0


@pytest.mark.slow
def test_offline_runs(env, hub, repos):
    main, _wanted, _ = repos
    offline = {"HF_HUB_OFFLINE": "1"}
    empty = env.run("download", **offline)
    assert empty.returncode == 2 and "HF_HUB_OFFLINE" in _clean(empty)
    assert env.run("download").returncode == 0
    served = sum(hub.requests.values())
    complete = env.run("download", **offline)
    assert complete.returncode == 0, _clean(complete)
    os.unlink(env.snapshot(main) / SHARD_2)
    partial = env.run("download", **offline)
    assert partial.returncode == 2 and SHARD_2 in _clean(partial)
    assert sum(hub.requests.values()) == served  # offline: not one request


def _cache_check(env, **extra) -> dict:
    result = env.run("doctor", "--format", "json", KIMI_PREFLIGHT="warn", **extra)
    report = json.loads(result.stdout)
    return next(c for c in report["checks"] if c["check"] == "cache")


@pytest.mark.slow
def test_preflight_knows_complete_partial_and_missing_weights(env, hub, repos):
    main, _, _ = repos
    env.cache.mkdir()
    missing = _cache_check(env, HF_HUB_OFFLINE="1")
    assert missing["status"] == "error" and "kimi-serve download" in missing["message"]
    assert env.run("download").returncode == 0
    complete = _cache_check(env)
    assert complete["status"] in ("ok", "warning") and "weights complete" in complete["message"]
    os.unlink(env.snapshot(main) / SHARD_2)
    partial = _cache_check(env)
    assert partial["status"] == "warning" and "1 of" in partial["message"] and "kimi-serve download" in partial["message"]
    assert _cache_check(env, HF_HUB_OFFLINE="1")["status"] == "error"


def test_an_unwritable_cache_is_one_clear_error(env, hub, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache should be")
    result = env.run("download", KIMI_CACHE_DIR=str(blocker))
    out = _clean(result)
    assert result.returncode == 2 and "cannot use the cache" in out


@pytest.mark.slow
def test_a_terminal_gets_a_progress_bar(env, hub, repos):
    import pty
    import select

    main, wanted, _ = repos
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a terminal has a size
    proc = subprocess.Popen([*env.popen_argv("download")], env=env.vars, stdin=follower, stdout=follower,
                            stderr=follower, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    screen = b"".join(chunks).decode(errors="replace")
    assert "download:" in screen and "100%" in screen and "|" in screen  # tqdm's bar, not the periodic lines
    assert env.fetched(main) == wanted


@pytest.mark.slow
def test_verify_falls_back_to_the_cached_listing_when_the_hub_is_gone(env, hub, repos):
    assert env.run("download").returncode == 0
    result = env.run("download", "--verify", HF_ENDPOINT="http://127.0.0.1:9")  # online, but nothing listens
    out = _clean(result)
    assert result.returncode == 0, out
    assert "using the listing cached at download time" in out
