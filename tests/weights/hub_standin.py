"""A stand-in of the Hugging Face Hub's HTTP API: the calls huggingface_hub 2.4.0 (with hf_xet
1.8.0) makes for `snapshot_download` / `hf download`, in the shapes it reads (tests/data/hub/
PROVENANCE.md says where they were measured):

- GET  /api/models/{repo}/revision/{rev} -> {"id", "sha", "siblings", ...}
- GET  /api/models/{repo}/tree/{rev}?recursive=true -> [{"type","path","size","oid","lfs"?}]
- HEAD / GET /{repo}/resolve/{rev}/{path} -> X-Repo-Commit, ETag (X-Linked-Etag and
  X-Linked-Size for LFS files), Range -> 206
- errors as the hub sends them: the X-Error-Code header (GatedRepo, RepoNotFound,
  RevisionNotFound, EntryNotFound) with 401/403/404.

The real hub answers an LFS file's resolve with a 302 to its CDN; this one serves it directly
(the client reads the same headers either way). No Xet: files carry no xetHash, so the client
takes its plain HTTP path.
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

MIRRORS = "huggingface_hub 2.4.0"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n").encode()


@dataclass
class Repo:
    repo_id: str
    files: Dict[str, bytes]
    commit: str = ""
    gated: bool = False
    branches: tuple = ("main",)

    def __post_init__(self):
        if not self.commit:
            self.commit = hashlib.sha1(self.repo_id.encode() + b"".join(self.files[p] for p in sorted(self.files))).hexdigest()

    def is_lfs(self, path: str) -> bool:
        return path.endswith(".safetensors") or len(self.files[path]) > 10_000

    def tree(self) -> list:
        """The recursive listing (computed once: the hub does not hash files per request)."""
        if getattr(self, "_tree", None) is None:
            self._tree = self._listing()
        return self._tree

    def etag(self, path: str) -> str:
        return self.tree_by_path()[path]["lfs"]["oid"] if self.is_lfs(path) else self.tree_by_path()[path]["oid"]

    def tree_by_path(self) -> dict:
        return {e["path"]: e for e in self.tree() if e["type"] == "file"}

    def _listing(self) -> list:
        entries, dirs = [], set()
        for path, data in sorted(self.files.items()):
            parts = path.split("/")[:-1]
            dirs.update("/".join(parts[:i + 1]) for i in range(len(parts)))
            if self.is_lfs(path):
                entry = {"type": "file", "oid": git_blob_sha1(lfs_pointer(data)), "size": len(data), "path": path,
                         "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}}
            else:
                entry = {"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": path}
            entries.append(entry)
        return [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(dirs)] + entries


@dataclass
class Behaviour:
    token: str = "hf_standin_secret_token"
    reset_once: set = field(default_factory=set)  # paths whose first GET is cut by a TCP reset
    unavailable_once: set = field(default_factory=set)  # paths whose first GET answers 503
    hold: set = field(default_factory=set)  # paths whose GET never finishes (until released)
    bytes_per_s: Optional[float] = None  # throttle file bodies
    released: threading.Event = field(default_factory=threading.Event)


class Hub:
    def __init__(self, repos, behaviour: Optional[Behaviour] = None):
        self.repos = {r.repo_id: r for r in repos}
        self.behaviour = behaviour or Behaviour()
        self.requests: Counter = Counter()  # (method, repo, path or api kind)
        self.bodies_done: Counter = Counter()  # path -> complete file bodies sent
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.behaviour.released.set()
        self.server.shutdown()
        self.server.server_close()

    def gets(self, path: str, repo: str = "moonshotai/Kimi-K2.5") -> int:
        return sum(n for (method, r, p), n in self.requests.items() if method == "GET" and p == path and r == repo)

    def count(self, method: str, repo: str, path: str) -> None:
        with self._lock:
            self.requests[(method, repo, path)] += 1

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, body: bytes = b"", headers: Optional[dict] = None, head: bool = False):
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                if "Content-Length" not in (headers or {}):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _error(self, status: int, code: str, message: str, head: bool = False):
                body = json.dumps({"error": message}).encode()
                self._send(status, body, {"X-Error-Code": code, "X-Error-Message": message,
                                          "Content-Type": "application/json"}, head)

            def _authorised(self, repo: Repo) -> bool:
                return not repo.gated or self.headers.get("Authorization") == f"Bearer {hub.behaviour.token}"

            def _repo_or_error(self, repo_id: str, head: bool = False) -> Optional[Repo]:
                repo = hub.repos.get(repo_id)
                if repo is None:
                    self._error(401, "RepoNotFound", "Repository Not Found", head)
                    return None
                if not self._authorised(repo):
                    self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted.", head)
                    return None
                return repo

            def _commit(self, repo: Repo, rev: str, head: bool = False) -> Optional[str]:
                if rev == repo.commit or rev in repo.branches:
                    return repo.commit
                self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
                return None

            def do_GET(self):
                self._route(head=False)

            def do_HEAD(self):
                self._route(head=True)

            def _route(self, head: bool):
                parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
                    return self._api(f"{parts[2]}/{parts[3]}", parts[4], parts[5], head)
                if len(parts) >= 5 and parts[2] == "resolve":
                    return self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head)
                self._error(404, "EntryNotFound", "not found", head)

            def _api(self, repo_id: str, kind: str, rev: str, head: bool):
                hub.count("GET", repo_id, f"api:{kind}")
                repo = self._repo_or_error(repo_id, head)
                commit = repo and self._commit(repo, rev, head)
                if not commit:
                    return
                if kind == "revision":
                    doc = {"id": repo_id, "modelId": repo_id, "sha": commit, "private": False, "gated": repo.gated,
                           "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
                else:
                    doc = repo.tree()
                self._send(200, json.dumps(doc).encode(), {"Content-Type": "application/json"}, head)

            def _resolve(self, repo_id: str, rev: str, path: str, head: bool):
                hub.count("HEAD" if head else "GET", repo_id, path)
                repo = self._repo_or_error(repo_id, head)
                commit = repo and self._commit(repo, rev, head)
                if not commit:
                    return
                if path not in repo.files:
                    return self._error(404, "EntryNotFound", f"{path} does not exist", head)
                data, etag = repo.files[path], repo.etag(path)
                headers = {"X-Repo-Commit": commit, "ETag": f'"{etag}"', "Accept-Ranges": "bytes",
                           "Content-Type": "application/octet-stream"}
                if repo.is_lfs(path):
                    headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(data))})
                if path in hub.behaviour.unavailable_once and not head:
                    hub.behaviour.unavailable_once.discard(path)
                    return self._error(503, "ServiceUnavailable", "overloaded, retry later")
                start, status = 0, 200
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and not head:
                    start = int(rng[6:].split("-")[0] or 0)
                    status = 206
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                body = data[start:]
                headers["Content-Length"] = str(len(body))
                if head:
                    return self._send(200, b"", headers, head=True)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self._body(path, body)

            def _body(self, path: str, body: bytes):
                b = hub.behaviour
                if path in b.reset_once:
                    b.reset_once.discard(path)
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                if path in b.hold:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    b.released.wait(120)
                    self.close_connection = True
                    return
                step = 256 * 1024
                for i in range(0, len(body), step):
                    self.wfile.write(body[i:i + step])
                    if b.bytes_per_s:
                        time.sleep(step / b.bytes_per_s)
                with hub._lock:
                    hub.bodies_done[path] += 1

        return Handler


DRAFT_ID = "lightseekorg/kimi-k2.5-eagle3-mla"  # the Eagle3 draft model the recipe's spec_decoding names


def draft_repo() -> Repo:
    return Repo(DRAFT_ID, {"config.json": b'{"architectures": ["Eagle3"]}', "model.safetensors": bytes(range(256)) * 160,
                           "README.md": b"# eagle3\n", "training_args.bin": b"x" * 100})


LAYOUT = Path(__file__).resolve().parent.parent / "data" / "hub" / "kimi-k2.5-files.txt"
# Traps beyond the real layout: an `original/` copy vLLM ignores, a JSON file below the top.
EXTRA_NOT_READ = ("original/model.safetensors", "docs/benchmarks.json")


def layout() -> Dict[str, bool]:
    """path -> read by vLLM, from the Kimi-K2.5 layout file."""
    rows = [line.split() for line in LAYOUT.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return {path: flag == "yes" for path, flag in rows}


def kimi_like_repo(repo_id: str = "moonshotai/Kimi-K2.5", shards: int = 4, shard_bytes: int = 64 * 1024,
                   seed: int = 0) -> Tuple[Repo, List[str]]:
    """A small repository with Kimi-K2.5's file layout (`shards` weight shards) and the files
    vLLM reads of it."""
    rnd = random.Random(seed)
    files: Dict[str, bytes] = {}
    wanted: List[str] = []
    for path, read in layout().items():
        if path.endswith(".safetensors"):
            names = [f"model-{i:05d}-of-{shards:06d}.safetensors" for i in range(1, shards + 1)]
            files.update({name: rnd.randbytes(shard_bytes) for name in names})
            wanted += names
            continue
        if path == "model.safetensors.index.json":
            files[path] = json.dumps({"metadata": {"total_size": shards * shard_bytes}, "weight_map": {
                f"layer.{i}.weight": f"model-{i:05d}-of-{shards:06d}.safetensors" for i in range(1, shards + 1)}}).encode()
        elif path.endswith(".model") or path.endswith(".png"):
            files[path] = rnd.randbytes(20_000)
        else:
            files[path] = f"{path} {seed}\n".encode()
        if read:
            wanted.append(path)
    files["original/model.safetensors"] = rnd.randbytes(shard_bytes)
    files["docs/benchmarks.json"] = b"{}"
    return Repo(repo_id, files), sorted(wanted)
