"""A real HTTP server shaped like the Hugging Face Hub, for the download tests.

Serves what the download program and the operator's pre-download read use, as the Hub serves it:
  GET /api/models/{org}/{name}/revision/{rev}?blobs=true  -> {"id", "sha", "siblings": [{rfilename, blobId, size, lfs?}]}
  GET /{org}/{name}/resolve/{rev}/{path}                   -> the file; LFS files answer 302 to a CDN host
                                                              (here "localhost" instead of "127.0.0.1"), which
                                                              takes no token and serves Range requests
Gated repositories answer 401 without a token and 403 for a token that was not granted access (their listing too,
unless Repo.open_listing: the Hub itself now lists them to anyone); unknown
repositories answer 401 without a token (the Hub does not reveal what exists) and 404 with one; errors carry
the Hub's X-Error-Code header. Faults to inject: cut a file's first response after N bytes, hold a response
after N bytes until released (then close it, or with pause_after send the rest), serve corrupted bytes.
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".safetensors", ".bin", ".pth")


@dataclass
class Repo:
    files: dict[str, bytes]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    revisions: tuple[str, ...] = ("main",)
    gated: bool = False
    hostile: bool = False  # lists `sha` for any revision and serves its files under any revision path (a lying endpoint)
    # A gated repository whose file listing anyone may read, as the Hub answers since 2024 (huggingface.js issue 945,
    # a Hub maintainer: "it's now possible to list gated files with the API"); its files still need a granted token.
    open_listing: bool = False

    def is_lfs(self, path: str) -> bool:
        return path.endswith(LFS_SUFFIXES)


@dataclass
class Faults:
    cut_after: dict[str, int] = field(default_factory=dict)      # path -> bytes sent before the connection drops (once)
    hold_after: dict[str, int] = field(default_factory=dict)     # path -> bytes sent before waiting for `release`
    pause_after: dict[str, int] = field(default_factory=dict)    # the same, then the rest of the body is sent
    corrupt: set[str] = field(default_factory=set)
    release: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)


class HubServer:
    GOOD_TOKEN = "hf_good"
    UNGRANTED_TOKEN = "hf_not_granted"

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.faults = Faults()
        self.log: list[tuple[str, str, dict[str, str]]] = []  # (host, path, headers)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # noqa: N802
                with server._lock:
                    server.log.append((self.headers.get("Host", ""), self.path, dict(self.headers)))
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.faults.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- what the hub answers ----

    def _error(self, h, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        h.end_headers()
        h.wfile.write(body)

    def _access(self, h, repo_id: str, listing: bool = False) -> Repo | None:
        auth = h.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        repo = self.repos.get(repo_id)
        if repo is None:
            if token is None:
                self._error(h, 401, "RepoNotFound", "Repository not found")
            else:
                self._error(h, 404, "RepoNotFound", "Repository not found")
            return None
        if repo.gated and not (listing and repo.open_listing):
            if token is None:
                self._error(h, 401, "GatedRepo", f"Access to model {repo_id} is restricted. You must be authenticated.")
                return None
            if token != self.GOOD_TOKEN:
                self._error(h, 403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in the authorized list.")
                return None
        return repo

    def handle(self, h) -> None:
        url = urllib.parse.urlsplit(h.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "revision":
            repo_id = f"{parts[2]}/{parts[3]}"
            repo = self._access(h, repo_id, listing=True)
            if repo is None:
                return
            if parts[5] not in repo.revisions and parts[5] != repo.sha and not repo.hostile:
                return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {parts[5]}")
            siblings = []
            for path, data in sorted(repo.files.items()):
                sib = {"rfilename": path, "blobId": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(), "size": len(data)}
                if repo.is_lfs(path):
                    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n"
                    sib["blobId"] = hashlib.sha1(b"blob %d\0" % len(pointer) + pointer.encode()).hexdigest()
                    sib["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": len(pointer)}
                siblings.append(sib)
            body = json.dumps({"id": repo_id, "sha": repo.sha, "private": False, "gated": "manual" if repo.gated else False,
                               "siblings": siblings}).encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        if len(parts) >= 5 and parts[2] == "resolve":
            repo_id, rev, path = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
            repo = self._access(h, repo_id)
            if repo is None:
                return
            if repo.hostile:  # whatever revision path its own listing made the client ask for
                rev = repo.sha
                path = next((p for i in range(3, len(parts)) if (p := "/".join(parts[i:])) in repo.files), path)
            if rev not in repo.revisions and rev != repo.sha:
                return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
            if path not in repo.files:
                return self._error(h, 404, "EntryNotFound", f"{path} does not exist on {rev}")
            if repo.is_lfs(path):
                # The Hub hands LFS files to its CDN: another host, a signed URL, no token needed.
                h.send_response(302)
                h.send_header("Location", f"http://localhost:{self.port}/cdn/{repo_id}/{urllib.parse.quote(path)}?X-Amz-Signature=x")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            return self._serve(h, path, repo.files[path])
        if parts[0] == "cdn" and len(parts) >= 4:
            repo = self.repos.get(f"{parts[1]}/{parts[2]}")
            path = "/".join(parts[3:])
            if repo is None or path not in repo.files:
                return self._error(h, 404, "EntryNotFound", "no such object")
            return self._serve(h, path, repo.files[path])
        self._error(h, 404, "NotFound", "not found")

    def _serve(self, h, path: str, data: bytes) -> None:
        if path in self.faults.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[len("bytes="):-1])
            if start >= len(data):
                h.send_response(416)
                h.send_header("Content-Range", f"bytes */{len(data)}")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            h.send_response(200)
        body = data[start:]
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Accept-Ranges", "bytes")
        h.end_headers()
        cut = self.faults.cut_after.pop(path, None)
        hold = self.faults.hold_after.pop(path, None)
        pause = self.faults.pause_after.pop(path, None)
        if pause is not None:
            h.wfile.write(body[:pause])
            h.wfile.flush()
            self.faults.held.set()
            self.faults.release.wait(60)
            h.wfile.write(body[pause:])
            return
        if cut is not None:
            h.wfile.write(body[:cut])
            h.wfile.flush()
            h.close_connection = True
            return
        if hold is not None:
            h.wfile.write(body[:hold])
            h.wfile.flush()
            self.faults.held.set()
            self.faults.release.wait(60)
            h.close_connection = True
            return
        h.wfile.write(body)

    def requests_for(self, fragment: str) -> list[tuple[str, str, dict[str, str]]]:
        with self._lock:
            return [entry for entry in self.log if fragment in entry[1]]
