"""Model download program: fetch an hf:// or s3:// checkpoint ONCE into the model cache.

Runs in the operator's download Job as `python -m llmbackend.model_fetch download ...` (standard
library only; the architecture step imports api/checkpoint lazily). The operator process itself never
calls a source: config.json and the safetensors index are fetched first and the architecture read from
them goes out in the progress line, before the weights.

Everything a listing or a URI names is input from whoever runs the endpoint or wrote the spec: each name
that becomes a path is checked first (parse_uri, _safe_relative, the listing's commit), the endpoint is
part of the cache key, and a copy is reused only when its marker lists exactly the listed files and every file,
hashed again, matches what the source lists (a tampered copy is named CacheTampered, moved aside, fetched again), and
after this run's own credentials read each listed file's first byte (check_read_access: the copy is the source's,
whoever's credentials fetched it, and a listing may be open where the files are not).

Layout of the cache volume (<key>: hf/org/name or s3/bucket/prefix; hf-<digest>/... and s3-<digest>/... through
a source.endpoint other than the default, see endpoint_id):
  <cache>/.llmbackend-cache.json          this is a model cache (prune() deletes nothing where it is missing)
  <cache>/<key>/.llmbackend-source.json   and <cache>/.staging/<key>/...: a source directory this program made
  <cache>/.staging/<key>/<revision>.<staging name>/...   files being downloaded by one Job (`*.part` while
                                          incomplete; the name is the Job's, --staging-name, so its next pod resumes)
  <cache>/<key>/<revision>/...            a complete, verified copy; renamed there in one step
  <cache>/<key>/<revision>/.llmbackend-complete.json   the completion marker (written before the rename):
                                          the revision and every file's size and listed hash
  <cache>/<key>/refs/<requested revision> -> ../<revision>  (hf://: a commit; s3://: "latest" -> a listing digest)
Nothing half-downloaded is ever at a path a server loads.

Several Jobs may download one source at once (backends of one source with different Secrets, or none, get a Job
each; the operator's render/modelcache.download_job_name): each writes only its own staging directory, and a
finished one is renamed into place in one step. The rename of the first wins; a later one finds the copy there
(the rename of a directory onto a non-empty one fails), checks it like any copy it would reuse, and deletes its own.
Files beside a copy (markers, ref links) are replaced through temporary names of their own, never a shared one.

Verification: every file's size; sha256 of LFS files and the git blob sha1 of small files (hf://);
the MD5 ETag of single-part, non-KMS objects (s3://). A mismatch deletes the file and fails (exit 16). The marker
records each file's check for reuse (a sha256 of our own where the source lists no usable hash).
Resume: a `.part` file is continued with an HTTP Range request (here, and by the next Job attempt).

Progress: a JSON file (--progress-file) rewritten atomically; the final state also goes to the
termination message (--termination-log), which the operator reads into status.model.

Also: `inspect` (a pvc source's config.json -> architecture, for the inspector Job) and `prune` (delete
copies and refs no backend uses any more, for the cleanup Job: only what this program made; see prune()).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import fnmatch
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

HF_ENDPOINT = "https://huggingface.co"
MARKER = ".llmbackend-complete.json"
# What the cleanup recognises as the download program's own (prune() deletes nothing else): the cache root carries
# CACHE_ROOT_MARKER, every source directory it made (<key>/, .staging/<key>/) a SOURCE_MARKER naming its key.
CACHE_ROOT_MARKER = ".llmbackend-cache.json"
SOURCE_MARKER = ".llmbackend-source.json"
REASON_CACHE_TAMPERED = "CacheTampered"  # a cached copy differed from its source's hashes: moved aside and fetched again
CHUNK = 1 << 20
RETRIES = 5
TERMINATION_LIMIT = 4096

# Exit codes, each with the reason the operator puts on the ModelReady condition.
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_UNAUTHORIZED = 10
EXIT_FORBIDDEN = 11
EXIT_NOT_FOUND = 12
EXIT_NO_CONFIG = 13
EXIT_TOO_LARGE = 14
EXIT_NO_CREDENTIALS = 15
EXIT_VERIFY_FAILED = 16
EXIT_UNREACHABLE = 17
EXIT_BAD_CONFIG = 18
EXIT_CACHE_ERROR = 19
REASONS = {
    EXIT_USAGE: "InvalidSource",
    EXIT_UNAUTHORIZED: "SourceUnauthorized",
    EXIT_FORBIDDEN: "SourceForbidden",
    EXIT_NOT_FOUND: "SourceNotFound",
    EXIT_NO_CONFIG: "CheckpointConfigMissing",
    EXIT_TOO_LARGE: "CheckpointLargerThanCache",
    EXIT_NO_CREDENTIALS: "SourceCredentialsMissing",
    EXIT_VERIFY_FAILED: "DownloadVerificationFailed",
    EXIT_UNREACHABLE: "SourceUnreachable",
    EXIT_BAD_CONFIG: "InvalidCheckpointConfig",
    EXIT_CACHE_ERROR: "ModelCacheError",
}
# Weight formats a server does not need when safetensors are present (Llama repos also ship original/).
SKIP_WITH_SAFETENSORS = ("*.bin", "*.pt", "*.pth", "*.gguf", "*.h5", "*.msgpack", "*.onnx", "*.ckpt", "original/*")


class FetchError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.reason = REASONS.get(code, "DownloadFailed")


# Names that become path components in the cache. A ref name is a single git ref-name component
# (git check-ref-format: no "..", no leading or trailing ".", no ".lock" suffix); a commit is 40 hex digits
# (what the Hub lists as a revision's `sha`); a repository part is what the Hub allows in org and name.
COMMIT = re.compile(r"[0-9a-f]{40}")
REF_NAME = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*")
REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]*(\.[A-Za-z0-9_\-]+)*")
MAX_COMPONENT = 255


def valid_revision(revision: str) -> bool:
    """A commit hash or a single git ref-name component: safe as a directory name of the cache."""
    return bool(COMMIT.fullmatch(revision) or (
        REF_NAME.fullmatch(revision) and not revision.endswith(".lock") and len(revision) <= MAX_COMPONENT))


def endpoint_id(scheme: str, endpoint: str | None) -> str:
    """The endpoint part of a cache key: "" for the default (the Hub, AWS), else a digest of the endpoint,
    so one URI through two endpoints gets two copies (whoever answers first cannot decide what others load)."""
    normalized = (endpoint or "").strip().rstrip("/")
    if not normalized or (scheme == "hf" and normalized == HF_ENDPOINT):
        return ""
    return hashlib.sha256(normalized.encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class Source:
    scheme: str  # "hf" or "s3"
    repo: str  # hf: org/name; s3: bucket
    revision: str  # hf: requested revision; s3: "" (the listing digest is resolved)
    prefix: str = ""  # s3 key prefix, without the trailing slash
    endpoint: str = ""  # endpoint_id(): "" for the default endpoint

    @property
    def key(self) -> str:
        """Directory of this source in the cache (revision directories go under it): scheme, endpoint, repository."""
        top = f"{self.scheme}-{self.endpoint}" if self.endpoint else self.scheme
        if self.scheme == "hf":
            return f"{top}/{self.repo}"
        return f"{top}/" + "/".join(p for p in (self.repo, self.prefix) if p)

    @property
    def requested(self) -> str:
        return self.revision or "latest"


def parse_uri(uri: str, endpoint: str | None = None) -> Source:
    """The source of a URI through `endpoint` (None: the default). Every part that becomes a path in the
    cache is checked here, whatever the API server let through (objects stored before a rule existed)."""
    parsed = urllib.parse.urlsplit(uri)
    if "\0" in uri or "\\" in uri:
        raise FetchError(EXIT_USAGE, f"{uri!r}: NUL and backslash are not allowed in a source URI")
    if parsed.scheme == "hf":
        path = parsed.netloc + parsed.path
        name, at, revision = path.partition("@")
        parts = name.strip("/").split("/")
        if len(parts) != 2 or not all(REPO_PART.fullmatch(p) for p in parts):
            raise FetchError(EXIT_USAGE, f"{uri!r}: expected hf://org/name[@revision]")
        if at and not valid_revision(revision):
            raise FetchError(EXIT_USAGE, f"{uri!r}: the revision must be a 40-hex commit or a branch or tag name "
                                         "(letters, digits, '-', '_', single dots inside; no '..'); fix source.uri")
        return Source("hf", "/".join(parts), revision or "main", endpoint=endpoint_id("hf", endpoint))
    if parsed.scheme == "s3":
        if not REPO_PART.fullmatch(parsed.netloc):
            raise FetchError(EXIT_USAGE, f"{uri!r}: expected s3://bucket[/prefix]")
        prefix = parsed.path.strip("/")
        if prefix:
            _safe_relative(prefix, EXIT_USAGE)
        return Source("s3", parsed.netloc, "", prefix, endpoint=endpoint_id("s3", endpoint))
    raise FetchError(EXIT_USAGE, f"{uri!r}: only hf:// and s3:// sources are downloaded")


@dataclasses.dataclass
class RemoteFile:
    path: str
    size: int
    url: str
    sha256: str | None = None
    git_sha1: str | None = None
    md5: str | None = None


def _safe_component(name: str) -> bool:
    return (name not in ("", ".", "..") and len(name.encode()) <= MAX_COMPONENT
            and not any(c in name for c in "\\\0") and all(ord(c) >= 0x20 and ord(c) != 0x7F for c in name))


def _safe_relative(path: str, code: int = EXIT_VERIFY_FAILED) -> str:
    """A relative path (from a remote listing, a URI or a --keep) that stays below the directory it is joined to."""
    if not path or path.startswith("/") or not all(_safe_component(p) for p in path.split("/")):
        raise FetchError(code, f"refusing a name that would leave its directory of the cache: {path!r}")
    if path.split("/")[0] == MARKER:
        raise FetchError(code, f"refusing a remote file named like the completion marker: {path!r}")
    return path


def select_files(files: list[RemoteFile]) -> list[RemoteFile]:
    """The files a server needs; a listing that names a path twice, or a file and a directory by one name, is refused."""
    paths = [f.path for f in files]
    dirs = {"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)}
    if len(set(paths)) != len(paths) or dirs & set(paths):
        raise FetchError(EXIT_VERIFY_FAILED, "the listing names a path twice, or as both a file and a directory; "
                                             "check that source.endpoint is a Hugging Face Hub or an S3 store")
    if any(f.path.endswith(".safetensors") for f in files):
        files = [f for f in files if not any(fnmatch.fnmatch(f.path, g) for g in SKIP_WITH_SAFETENSORS)]
    return files


# ---- HTTP ----

class _NoAuthAcrossHosts(urllib.request.HTTPRedirectHandler):
    """Follow redirects (the Hub sends LFS files to a CDN) without handing the token to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.headers.pop("Authorization", None)
            new.unredirected_hdrs.pop("Authorization", None)
        return new


_OPENER = urllib.request.build_opener(_NoAuthAcrossHosts)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # the redirect itself is the answer (urllib raises it as an HTTPError)


_NO_REDIRECT_OPENER = urllib.request.build_opener(_NoRedirect)


def check_read_access(client: Hub | S3, files: list[RemoteFile]) -> None:
    """Raise the source's FetchError unless these credentials may read every listed file. A copy already in the cache
    is reused only after this: the copy is one per source, whoever's credentials fetched it, and a listing may be
    open where the files are not (the Hub lists a gated repository's files to anyone: huggingface.js issue 945, a
    Hub maintainer, 2024-10; an S3 policy may allow s3:ListBucket and deny s3:GetObject). One request per file for
    its first byte (Range: bytes=0-0), never following a redirect: the Hub answers a readable LFS file with a signed
    redirect to its CDN, which is the answer."""
    for f in files:
        headers = dict(client.headers(f.url) if isinstance(client, S3) else client.headers())
        headers["Range"] = "bytes=0-0"
        try:
            with _NO_REDIRECT_OPENER.open(urllib.request.Request(f.url, headers=headers), timeout=60.0) as resp:
                resp.read(1)
        except urllib.error.HTTPError as err:
            if 300 <= err.code < 400 or err.code == 416:  # a redirect to the file; an empty file's range
                continue
            raise client.error(err, f"checking read access to {f.path}") from None
        except (urllib.error.URLError, OSError) as err:
            raise FetchError(EXIT_UNREACHABLE, f"checking read access to {f.path}: {err}") from None


def _open(url: str, headers: dict[str, str], timeout: float = 60.0) -> http.client.HTTPResponse:
    return _OPENER.open(urllib.request.Request(url, headers=headers), timeout=timeout)


# ---- Hugging Face Hub ----

def _read_json(url: str, headers: dict[str, str], path: str,
               error: Callable[[urllib.error.HTTPError, str], FetchError], server: str) -> dict[str, Any] | None:
    """A JSON file of the source (None when it is not there); errors as the source's client words them."""
    try:
        with _open(url, headers) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise error(err, f"reading {path}") from None
    except (urllib.error.URLError, OSError) as err:
        raise FetchError(EXIT_UNREACHABLE, f"reading {path}: cannot reach {server}: {err}") from None


class Hub:
    def __init__(self, source: Source, endpoint: str | None = None, token: str | None = None):
        self.source = source
        self.endpoint = (endpoint or HF_ENDPOINT).rstrip("/")
        self.token = token or None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def error(self, err: urllib.error.HTTPError, what: str) -> FetchError:
        code = err.headers.get("X-Error-Code", "") if err.headers else ""
        detail = (err.headers.get("X-Error-Message", "") if err.headers else "") or err.reason
        repo = self.source.repo
        if err.code == 401:
            if self.token:
                return FetchError(EXIT_UNAUTHORIZED, f"{what}: the Hub rejected the token (401 {detail}); put a valid token in the HF_TOKEN key of source.secretRef")
            return FetchError(EXIT_UNAUTHORIZED, f"{what}: {repo} is gated, private or does not exist (401 {code or detail}); "
                                                 "put a Hugging Face token in a Secret (key HF_TOKEN) and name it in source.secretRef")
        if err.code == 403:
            return FetchError(EXIT_FORBIDDEN, f"{what}: the token has no access to {repo} (403 {code or detail}); "
                                              "accept the model's license on its Hub page with the token's account, or use a token with read access")
        if err.code == 404:
            return FetchError(EXIT_NOT_FOUND, f"{what}: not found (404 {code or detail}); check the repository and revision in source.uri")
        return FetchError(EXIT_UNREACHABLE, f"{what}: HTTP {err.code} {detail}")

    def _get(self, url: str, what: str) -> http.client.HTTPResponse:
        try:
            return _open(url, self.headers())
        except urllib.error.HTTPError as err:
            raise self.error(err, what) from None
        except (urllib.error.URLError, OSError) as err:
            raise FetchError(EXIT_UNREACHABLE, f"{what}: cannot reach {self.endpoint}: {err}") from None

    def list_files(self) -> tuple[str, list[RemoteFile]]:
        """(resolved commit, files) from GET /api/models/{repo}/revision/{revision}?blobs=true."""
        src = self.source
        url = f"{self.endpoint}/api/models/{src.repo}/revision/{urllib.parse.quote(src.revision, safe='')}?blobs=true"
        with self._get(url, f"listing {src.repo}@{src.revision}") as resp:
            info = json.load(resp)
        sha = info.get("sha")
        if not isinstance(sha, str) or not sha:
            raise FetchError(EXIT_UNREACHABLE, f"listing {src.repo}@{src.revision}: the answer has no commit sha")
        # The commit names the copy's directory: a 40-hex id, and the very commit when the URI asks for one.
        if not COMMIT.fullmatch(sha):
            raise FetchError(EXIT_VERIFY_FAILED, f"listing {src.repo}@{src.revision}: {sha[:100]!r} is not a commit id; "
                                                 f"check that source.endpoint ({self.endpoint}) is a Hugging Face Hub")
        if COMMIT.fullmatch(src.revision) and sha != src.revision:
            raise FetchError(EXIT_VERIFY_FAILED, f"listing {src.repo}@{src.revision}: the endpoint answered with commit "
                                                 f"{sha}; check that source.endpoint ({self.endpoint}) is a Hugging Face Hub")
        files = []
        for sib in info.get("siblings") or []:
            path = _safe_relative(str(sib.get("rfilename", "")))
            lfs = sib.get("lfs") or {}
            size = lfs.get("size", sib.get("size"))
            if not isinstance(size, int):
                raise FetchError(EXIT_UNREACHABLE, f"listing {src.repo}: no size for {path} (is this a Hub-compatible endpoint?)")
            files.append(RemoteFile(
                path=path, size=size, url=self.resolve_url(sha, path),
                sha256=lfs.get("sha256"), git_sha1=None if lfs else sib.get("blobId"),
            ))
        return sha, files

    def resolve_url(self, revision: str, path: str) -> str:
        return f"{self.endpoint}/{self.source.repo}/resolve/{revision}/{urllib.parse.quote(path)}"

    def read_json(self, revision: str, path: str) -> dict[str, Any] | None:
        return _read_json(self.resolve_url(revision, path), self.headers(), path, self.error, self.endpoint)


# ---- S3 (SigV4, path-style for custom endpoints) ----

def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sigv4_headers(method: str, url: str, region: str, access_key: str, secret_key: str,
                  session_token: str | None = None, now: datetime.datetime | None = None,
                  payload_hash: str = "UNSIGNED-PAYLOAD", extra: dict[str, str] | None = None) -> dict[str, str]:
    """AWS Signature Version 4 headers for an S3 request (body not signed unless payload_hash is given;
    `extra` headers are signed and returned too)."""
    now = now or datetime.datetime.now(datetime.UTC)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    parts = urllib.parse.urlsplit(url)
    query = sorted(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    canonical_query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in query)
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    headers.update({k.lower(): v for k, v in (extra or {}).items()})
    if session_token:
        headers["x-amz-security-token"] = session_token
    signed = ";".join(sorted(headers))
    canonical = "\n".join([
        method, parts.path or "/", canonical_query,
        "".join(f"{k}:{headers[k].strip()}\n" for k in sorted(headers)), signed, payload_hash,
    ])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, _sha256_hex(canonical.encode())])
    key = ("AWS4" + secret_key).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {k: v for k, v in headers.items() if k != "host"}
    out["Authorization"] = f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    return out


_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class S3:
    def __init__(self, source: Source, endpoint: str | None = None, region: str | None = None,
                 access_key: str | None = None, secret_key: str | None = None, session_token: str | None = None,
                 anonymous: bool = False):
        self.source = source
        self.region = region or "us-east-1"
        if endpoint:
            self.base = endpoint.rstrip("/") + "/" + source.repo  # path style: MinIO, Ceph, moto, ...
        else:
            self.base = f"https://{source.repo}.s3.{self.region}.amazonaws.com"
        if not anonymous and not (access_key and secret_key):
            raise FetchError(EXIT_NO_CREDENTIALS, f"no credentials for s3://{source.repo}: put AWS_ACCESS_KEY_ID and "
                                                  "AWS_SECRET_ACCESS_KEY in a Secret and name it in source.secretRef")
        self.creds = None if anonymous else (access_key, secret_key, session_token)

    def headers(self, url: str) -> dict[str, str]:
        if self.creds is None:
            return {}
        access, secret, token = self.creds
        return sigv4_headers("GET", url, self.region, access or "", secret or "", token)

    def error(self, err: urllib.error.HTTPError, what: str) -> FetchError:
        try:
            body = err.read().decode(errors="replace")
            code = (ET.fromstring(body).findtext("Code") or "") if body.strip().startswith("<") else ""
        except (ET.ParseError, OSError):
            code = ""
        bucket = self.source.repo
        if err.code == 404:
            return FetchError(EXIT_NOT_FOUND, f"{what}: {code or 'not found'} (404); check the bucket and prefix in source.uri")
        if err.code in (401, 403):
            return FetchError(EXIT_FORBIDDEN, f"{what}: {code or 'access denied'} ({err.code}); check the keys in source.secretRef "
                                              f"and that they may read s3://{bucket}, and source.endpoint/region")
        return FetchError(EXIT_UNREACHABLE, f"{what}: HTTP {err.code} {code}")

    def object_url(self, key: str) -> str:
        return f"{self.base}/{urllib.parse.quote(key, safe='/-_.~')}"

    def list_files(self) -> tuple[str, list[RemoteFile]]:
        """(listing digest, files) from ListObjectsV2 under the prefix."""
        prefix = self.source.prefix + "/" if self.source.prefix else ""
        files: list[RemoteFile] = []
        token = None
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            url = self.base + "/?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
            try:
                with _open(url, self.headers(url)) as resp:
                    root = ET.fromstring(resp.read())
            except urllib.error.HTTPError as err:
                raise self.error(err, f"listing s3://{self.source.repo}/{prefix}") from None
            except (urllib.error.URLError, OSError) as err:
                raise FetchError(EXIT_UNREACHABLE, f"listing s3://{self.source.repo}: cannot reach {self.base}: {err}") from None
            for item in root.iter(f"{_S3_NS}Contents"):
                key = item.findtext(f"{_S3_NS}Key") or ""
                if key.endswith("/"):
                    continue  # directory placeholder objects
                if not key.startswith(prefix):
                    raise FetchError(EXIT_VERIFY_FAILED, f"listing s3://{self.source.repo}/{prefix}: the store answered with "
                                                         f"key {key[:200]!r} outside the prefix; check source.endpoint")
                etag = (item.findtext(f"{_S3_NS}ETag") or "").strip('"')
                md5 = etag if len(etag) == 32 and all(c in "0123456789abcdef" for c in etag.lower()) else None
                files.append(RemoteFile(path=_safe_relative(key[len(prefix):]), size=int(item.findtext(f"{_S3_NS}Size") or 0),
                                        url=self.object_url(key), md5=md5))
            if (root.findtext(f"{_S3_NS}IsTruncated") or "false").lower() != "true":
                break
            token = root.findtext(f"{_S3_NS}NextContinuationToken")
        if not files:
            raise FetchError(EXIT_NOT_FOUND, f"no objects under s3://{self.source.repo}/{prefix}; check the prefix in source.uri")
        listing = "\n".join(f"{f.path}\t{f.size}\t{f.md5 or ''}" for f in sorted(files, key=lambda f: f.path))
        return "s3-" + _sha256_hex(listing.encode())[:20], files

    def read_json(self, revision: str, path: str) -> dict[str, Any] | None:
        key = "/".join(p for p in (self.source.prefix, path) if p)
        url = self.object_url(key)
        return _read_json(url, self.headers(url), path, self.error, self.base)


def effective_endpoint(uri: str, endpoint: str | None, env: dict[str, str] | None = None) -> str | None:
    """The endpoint a download of `uri` talks to (hf://: --endpoint, else HF_ENDPOINT, else the Hub)."""
    env = dict(os.environ) if env is None else env
    return endpoint or (env.get("HF_ENDPOINT") if uri.startswith("hf://") else None) or None


def client_for(source: Source, endpoint: str | None = None, region: str | None = None,
               env: dict[str, str] | None = None, anonymous: bool = False) -> Hub | S3:
    env = dict(os.environ) if env is None else env
    if source.scheme == "hf":
        return Hub(source, endpoint, env.get("HF_TOKEN"))
    return S3(source, endpoint, region or env.get("AWS_REGION"), env.get("AWS_ACCESS_KEY_ID"),
              env.get("AWS_SECRET_ACCESS_KEY"), env.get("AWS_SESSION_TOKEN"), anonymous)


# ---- read without downloading: the CLI's (`llmbackend plan/render` on a user's machine), never the operator's ----

@dataclasses.dataclass
class CheckpointInfo:
    revision: str
    config: dict[str, Any]
    index: dict[str, Any] | None
    files_bytes: int  # what a download takes (selected files)
    safetensors_bytes: int


def read_checkpoint(uri: str, endpoint: str | None = None, region: str | None = None,
                    env: dict[str, str] | None = None, anonymous: bool = False) -> CheckpointInfo:
    """config.json and the safetensors index of a source, without downloading the weights.

    For the CLI only: the operator process never calls a source (tests/unit/test_egress.py checks that no module the
    operator runs calls this); in the cluster the download Job reads the same files first and reports them.
    """
    endpoint = effective_endpoint(uri, endpoint, env)
    source = parse_uri(uri, endpoint)
    client = client_for(source, endpoint, region, env, anonymous)
    revision, files = client.list_files()
    files = select_files(files)
    if not any(f.path == "config.json" for f in files):
        raise FetchError(EXIT_NO_CONFIG, f"{uri} has no config.json at its top level; point source.uri at the checkpoint directory")
    config = client.read_json(revision, "config.json")
    if config is None:
        raise FetchError(EXIT_NO_CONFIG, f"{uri}: config.json is listed but cannot be read")
    index = client.read_json(revision, "model.safetensors.index.json") if any(
        f.path == "model.safetensors.index.json" for f in files) else None
    return CheckpointInfo(revision, config, index, sum(f.size for f in files),
                          sum(f.size for f in files if f.path.endswith(".safetensors")))


# ---- download ----

LOG_FIELDS = ("phase", "bytesDone", "bytesTotal", "resolvedRevision", "path", "architecture", "reason", "message")
LOG_MESSAGE_LIMIT = 2048  # a message may quote what a server said; the operator reads at most 16 KiB of the line


def log_line(state: dict[str, Any]) -> str:
    """The progress line the operator reads (the last line of the pod's log): a few hundred bytes."""
    fields = {k: state[k] for k in LOG_FIELDS if k in state}
    if "message" in fields:
        fields["message"] = str(fields["message"])[:LOG_MESSAGE_LIMIT]
    return json.dumps(fields, sort_keys=True)


class Progress:
    """Progress in a JSON file and, every LOG_INTERVAL_S, as one JSON line on stdout: the operator reads
    the last line of the running Job pod's log into status.model."""

    LOG_INTERVAL_S = 5.0

    def __init__(self, path: str | None, state: dict[str, Any], log: bool = False):
        self.path = Path(path) if path else None
        self.state = state
        self.log = log
        self._last = 0.0
        self._last_log = 0.0

    def update(self, force: bool = False, **fields: Any) -> None:
        self.state.update(fields)
        now = time.monotonic()
        if self.log and (force or now - self._last_log >= self.LOG_INTERVAL_S):
            self._last_log = now
            print(log_line(self.state), flush=True)
        if self.path is None or (not force and now - self._last < 1.0):
            return
        self._last = now
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.state, sort_keys=True))
        os.replace(tmp, self.path)

    def add(self, n: int) -> None:
        self.update(bytesDone=self.state.get("bytesDone", 0) + n)


def _hash_file(path: Path, algo: str, git_size: int | None = None, progress: Progress | None = None) -> str:
    h = hashlib.new(algo)
    if git_size is not None:
        h.update(f"blob {git_size}\0".encode())
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            if progress is not None:  # re-hashing a large copy moves too: the operator's stall check sees it
                progress.add(len(chunk))
    return h.hexdigest()


def _problem(f: RemoteFile, path: Path, headers: dict[str, str]) -> str | None:
    """What is wrong with a downloaded file against what its source lists (None: nothing)."""
    size = path.stat().st_size
    if size != f.size:
        return f"size {size} != {f.size}"
    if f.sha256 and _hash_file(path, "sha256") != f.sha256:
        return "sha256 differs from the one the source lists"
    if f.git_sha1 and len(f.git_sha1) == 40 and _hash_file(path, "sha1", f.size) != f.git_sha1:
        return "git blob id differs from the one the source lists"
    if f.md5 and headers.get("x-amz-server-side-encryption") != "aws:kms" and _hash_file(path, "md5") != f.md5:
        return "MD5 differs from the object's ETag"
    return None


def _verify(f: RemoteFile, part: Path, headers: dict[str, str]) -> None:
    problem = _problem(f, part, headers)
    if problem:
        part.unlink(missing_ok=True)
        raise FetchError(EXIT_VERIFY_FAILED, f"{f.path}: {problem}; the file was deleted, the next attempt downloads it again")


def download_file(f: RemoteFile, dest: Path, headers_for: Callable[[str], dict[str, str]], progress: Progress) -> None:
    """Download one file to dest via dest.part, resuming what is there; verified before the rename."""
    part = dest.with_name(dest.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    last_headers: dict[str, str] = {}
    for attempt in range(RETRIES):
        have = part.stat().st_size if part.exists() else 0
        if have > f.size:
            part.unlink()
            progress.add(-have)
            have = 0
        if have == f.size:
            part.touch()  # empty files too
            break
        headers = dict(headers_for(f.url))
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            with _open(f.url, headers) as resp:
                last_headers = {k.lower(): v for k, v in resp.headers.items()}
                mode = "ab"
                if resp.status != 206 and have:
                    progress.add(-have)  # the server ignored the Range: start over
                    mode = "wb"
                with part.open(mode) as out:
                    # read1: write what arrived (a killed Job keeps it for the next attempt's Range request).
                    while chunk := resp.read1(CHUNK):
                        out.write(chunk)
                        out.flush()
                        progress.add(len(chunk))
        except urllib.error.HTTPError as err:
            if err.code == 416 and have == f.size:
                break
            if err.code in (401, 403, 404) or attempt == RETRIES - 1:
                raise FetchError({401: EXIT_UNAUTHORIZED, 403: EXIT_FORBIDDEN, 404: EXIT_NOT_FOUND}.get(err.code, EXIT_UNREACHABLE),
                                 f"downloading {f.path}: HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            if attempt == RETRIES - 1:
                raise FetchError(EXIT_UNREACHABLE, f"downloading {f.path}: {err} (after {RETRIES} attempts; the next attempt resumes)") from None
            time.sleep(min(2**attempt, 10) * 0.1)
    _verify(f, part, last_headers)
    os.replace(part, dest)


def _staged_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def _manifest(files: list[RemoteFile]) -> dict[str, list[Any]]:
    """What a complete copy holds, recorded in its marker: each file's size and the hash its source lists."""
    return {f.path: [f.size, f.sha256 or f.git_sha1 or f.md5 or ""] for f in sorted(files, key=lambda f: f.path)}


def _file_check(f: RemoteFile, path: Path) -> list[str]:
    """[algorithm, hex digest] a reused copy's file is checked against, recorded in the marker at download: the
    hash its source lists (sha256 of an LFS file, git blob id, MD5 ETag), else a sha256 of our own (S3 multipart
    and SSE-KMS objects, whose ETag is not an MD5 of the bytes)."""
    if f.sha256:
        return ["sha256", f.sha256]
    if f.git_sha1 and len(f.git_sha1) == 40:
        return ["git-blob", f.git_sha1]
    if f.md5 and _hash_file(path, "md5") == f.md5:
        return ["md5", f.md5]
    return ["local-sha256", _hash_file(path, "sha256")]


def _changed(f: RemoteFile, path: Path, recorded: Any, progress: Progress | None = None) -> str | None:
    """What differs in a cached file from what its source lists (None: nothing), its bytes hashed again.
    A hash the listing gives is checked against the listing, so the marker (in the cache, writable by whoever
    can write the cache) cannot weaken it; only a file the listing gives no usable hash for is checked against
    the sha256 the marker recorded."""
    size = path.stat().st_size
    if size != f.size:
        return f"size {size} != {f.size}"
    if f.sha256:
        algo, want = "sha256", f.sha256
    elif f.git_sha1 and len(f.git_sha1) == 40:
        algo, want = "git-blob", f.git_sha1
    elif isinstance(recorded, list) and len(recorded) == 2 and recorded[0] == "local-sha256":
        algo, want = "local-sha256", str(recorded[1])
    elif f.md5:
        algo, want = "md5", f.md5
    else:
        return None  # a marker of an older operator: no hash of ours recorded (checked by size; recorded now)
    name, git_size = {"git-blob": ("sha1", f.size), "md5": ("md5", None)}.get(algo, ("sha256", None))
    got = _hash_file(path, name, git_size, progress)
    if got != want:
        return {"sha256": "sha256 differs from the one the source lists",
                "git-blob": "git blob id differs from the one the source lists",
                "md5": "MD5 differs from the object's ETag",
                "local-sha256": "sha256 differs from the one recorded at download"}[algo]
    return None


def _copy_problem(final: Path, revision: str, files: list[RemoteFile],
                  progress: Progress | None = None) -> tuple[str, str]:
    """("ok" | "absent" | "outdated" | "tampered", what differs) for the copy at `final`.

    ok: its marker names this revision and exactly the listed files (sizes, hashes), it holds those files as plain
    files and nothing else, and every file's bytes hash to what the source lists (re-hashed here, on every reuse).
    outdated: a complete copy of another file selection (an older operator's); tampered: anything else at a path
    only this program writes, complete copies being renamed there whole. A marker of an older operator (no file list
    or no recorded hashes) is rewritten once its files pass."""
    if final.is_symlink():
        return "tampered", "the copy's directory is a symbolic link"
    if not final.exists():
        return "absent", ""
    try:
        marker = json.loads((final / MARKER).read_text())
    except (OSError, ValueError):
        return "tampered", "its completion marker is missing or unreadable"
    if not isinstance(marker, dict) or marker.get("revision") != revision:
        return "tampered", "its completion marker names another revision"
    expected = _manifest(files)
    if isinstance(marker.get("files"), dict) and marker["files"] != expected:
        return "outdated", "its marker lists another file selection"
    on_disk: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(final):
        here = Path(dirpath)
        for name in sorted(dirnames + filenames):
            rel = (here / name).relative_to(final).as_posix()
            if (here / name).is_symlink():
                return "tampered", f"{rel} is a symbolic link"
            if name in filenames and not (here / name).is_file():
                return "tampered", f"{rel} is not a plain file"
        for name in filenames:
            rel = (here / name).relative_to(final).as_posix()
            if rel != MARKER:
                on_disk[rel] = here / name
    extra, missing = sorted(set(on_disk) - set(expected)), sorted(set(expected) - set(on_disk))
    if extra or missing:
        return "tampered", "; ".join([f"{p}: not in the listing" for p in extra[:5]] + [f"{p}: missing" for p in missing[:5]])
    recorded: dict[str, Any] = marker["verify"] if isinstance(marker.get("verify"), dict) else {}
    problems = [f"{f.path}: {problem}" for f in sorted(files, key=lambda f: f.path)
                if (problem := _changed(f, on_disk[f.path], recorded.get(f.path), progress))]
    if problems:
        return "tampered", "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
    if marker.get("files") != expected or set(recorded) != set(expected):
        tmp = _tmp_path(final / MARKER)
        tmp.write_text(json.dumps({**marker, "files": expected, "verify": _checks(files, final)}, sort_keys=True))
        os.replace(tmp, final / MARKER)
    return "ok", ""


def _checks(files: list[RemoteFile], root: Path) -> dict[str, list[str]]:
    return {f.path: _file_check(f, root / f.path) for f in sorted(files, key=lambda f: f.path)}


def _tmp_path(path: Path) -> Path:
    """A temporary name beside `path` no other writer uses (concurrent Jobs' pods may all be PID 1)."""
    return path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace `path` in one step (a reader sees the old file or the new one)."""
    tmp = _tmp_path(path)
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def _mark_cache_root(cache: Path) -> None:
    """The cache root's marker: prune() deletes nothing in a directory without it."""
    if not (cache / CACHE_ROOT_MARKER).is_file():
        _write_json(cache / CACHE_ROOT_MARKER, {"kind": "llmbackend-model-cache", "layout": 1})


def _mark_source_dir(root: Path, key: str) -> None:
    """<root>/<key>/SOURCE_MARKER: this directory is one the download program made for `key` (what prune() may
    delete; root is the cache or its .staging)."""
    directory = root / key
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / SOURCE_MARKER).is_file():
        _write_json(directory / SOURCE_MARKER, {"key": key})


def _write_ref(cache: Path, source: Source, revision: str) -> None:
    """refs/<requested> -> ../<revision>: the stable path serving pods load (replaced in one step)."""
    _mark_source_dir(cache, source.key)
    refs = cache / source.key / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(refs / source.requested)
    os.symlink(f"../{revision}", tmp)
    os.replace(tmp, refs / source.requested)


# Quantization configs some exporters write next to config.json instead of inside it
# (NVIDIA ModelOpt: hf_quant_config.json; AutoGPTQ: quantize_config.json).
QUANT_CONFIG_FILES = ("hf_quant_config.json", "quantize_config.json")


def _read_json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:  # RecursionError: nested too deep
        raise ValueError(f"{path.name} is not valid JSON ({err}); fix or replace the file in the checkpoint") from None


def _with_quantization_file(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """config.json with `quantization_config` taken from a separate quantization file when it has none."""
    if isinstance(config.get("quantization_config"), dict):
        return config
    for name in QUANT_CONFIG_FILES:
        if not (path / name).is_file():
            continue
        extra = _read_json_file(path / name)
        if not isinstance(extra, dict):
            continue
        nested = extra.get("quantization")
        quant: dict[str, Any] = nested if isinstance(nested, dict) else extra  # ModelOpt nests it
        if name == "quantize_config.json" and "quant_method" not in quant:
            quant = {**quant, "quant_method": "gptq"}
        return {**config, "quantization_config": quant}
    return config


def inspect_dir(path: Path) -> dict[str, Any]:
    """Architecture of a checkpoint directory (the inspector's answer): {"architecture": ...}, or
    {"architectureError", "architectureReason"} saying what is wrong and what to do."""
    config_path = path / "config.json"
    if not config_path.is_file():
        where = f"{path} does not exist" if not path.is_dir() else f"no config.json in {path}"
        return {"architectureError": f"{where}; point the source (source.pvc.path, source.uri) at the directory that "
                                     "holds the Hugging Face checkpoint (config.json, *.safetensors)",
                "architectureReason": REASONS[EXIT_NO_CONFIG]}
    try:
        from .api.checkpoint import CheckpointError, architecture_from_config
    except ImportError:  # a plain Python without the operator's dependencies: nothing to report
        return {}
    index_path = path / "model.safetensors.index.json"
    single = path / "model.safetensors"
    try:
        config = _read_json_file(config_path)
        if not isinstance(config, dict):
            raise ValueError("config.json is not a JSON object")
        config = _with_quantization_file(config, path)
        index = _read_json_file(index_path) if index_path.is_file() else None
        weight_bytes = single.stat().st_size if index is None and single.is_file() else None
        arch = architecture_from_config(config, index if isinstance(index, dict) else None, weight_bytes)
    except (CheckpointError, ValueError) as err:
        return {"architectureError": str(err), "architectureReason": getattr(err, "reason", "InvalidCheckpointConfig")}
    return {"architecture": arch.dump()}


ADAPTER_CONFIG = "adapter_config.json"  # a PEFT LoRA adapter's configuration (spec.adapters)


# The download program's report of adapter_config.json (inspect_adapter) must fit the 4 KiB termination message
# with the rest of the report, whatever the file holds: each field it keeps has a type and a size (as JSON, so that
# escapes count: one non-ASCII character is written as 6).
ADAPTER_TEXT_LIMITS = {"peft_type": 64, "bias": 64, "base_model_name_or_path": 512}  # a Hub id, or a training path
ADAPTER_MODULE_LIMIT = 256  # one target_modules name (PEFT also takes a dotted path), or a PEFT regex
ADAPTER_MODULES_BUDGET = 1024  # the JSON of the target_modules names reported; the rest are counted, not named
MODULES_LEFT_OUT = "targetModulesLeftOut"
"""adapterConfig: how many distinct target_modules names did not fit the report (api/adapters.check_adapter, which
has the same key, reads an adapter with any left out as targeting modules it cannot verify, never as fitting)."""


def _json_size(value: Any) -> int:
    return len(json.dumps(value))


def _bounded_adapter_field(key: str, value: Any) -> str | None:
    """Why a kept adapter_config.json field cannot be reported as it is (wrong type, too large), else None."""
    if value is None:
        return None  # PEFT writes null for a field left unset
    if key in ADAPTER_TEXT_LIMITS:
        if not isinstance(value, str):
            return f"{key} is {type(value).__name__}, not a string"
        limit = ADAPTER_TEXT_LIMITS[key]
        return f"{key} is {_json_size(value)} bytes as JSON, more than {limit}" if _json_size(value) > limit else None
    if key == "r":
        if not isinstance(value, int) or isinstance(value, bool):
            return f"r is {type(value).__name__}, not the adapter's rank (a positive integer)"
        return f"r is {_json_size(value)} digits long, not a rank" if not -(2**31) < value < 2**31 else None
    if key == "use_dora":
        return None if isinstance(value, bool) else f"use_dora is {type(value).__name__}, not true or false"
    # target_modules: a list of module names, or one string (PEFT: "all-linear", or a regular expression)
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(m, str) for m in names):
        return "target_modules is neither a list of module names nor a string"
    long = next((m for m in names if _json_size(m) > ADAPTER_MODULE_LIMIT), None)
    return (f"target_modules has an entry of {_json_size(long)} bytes as JSON, more than {ADAPTER_MODULE_LIMIT}"
            if long is not None else None)


def _bounded_modules(names: list[str]) -> tuple[list[str], int]:
    """The distinct names (sorted) that fit ADAPTER_MODULES_BUDGET, and how many distinct names are left out."""
    distinct = sorted(set(names))
    kept: list[str] = []
    size = 2
    for name in distinct:
        size += _json_size(name) + 2
        if size > ADAPTER_MODULES_BUDGET:
            break
        kept.append(name)
    return kept, len(distinct) - len(kept)


def inspect_adapter(path: Path) -> dict[str, Any]:
    """What the operator checks of an adapter (api/adapters.check_adapter): the fields of adapter_config.json that
    decide whether it fits the base model, under "adapterConfig"; {"adapterConfigError"} when it is unreadable, or
    a field has a type or size no PEFT LoRA configuration has (the report must fit the termination message whole:
    a cut report would leave the adapter unchecked)."""
    try:
        config = _read_json_file(path / ADAPTER_CONFIG)
    except ValueError as err:
        return {"adapterConfigError": str(err)[:ADAPTER_MODULES_BUDGET]}
    if not isinstance(config, dict):
        return {"adapterConfigError": f"{ADAPTER_CONFIG} is not a JSON object"}
    keep = ("peft_type", "base_model_name_or_path", "r", "target_modules", "bias", "use_dora")
    picked = {k: config[k] for k in keep if k in config}
    for key, value in picked.items():
        problem = _bounded_adapter_field(key, value)
        if problem is not None:
            return {"adapterConfigError": f"{ADAPTER_CONFIG}: {problem}; PEFT does not write such a value: fix the "
                                          "file, or point the source at a PEFT LoRA adapter"}
    if isinstance(picked.get("target_modules"), list):  # the check needs the distinct names only
        picked["target_modules"], left_out = _bounded_modules(picked["target_modules"])
        if left_out:
            picked[MODULES_LEFT_OUT] = left_out
    return {"adapterConfig": picked}


def inspect_report(path: Path) -> dict[str, Any]:
    """What the inspector Job reports: phase Ready with the architecture, or Failed with a reason and message."""
    found = inspect_dir(path)
    if "architectureError" in found:
        return {"phase": "Failed", "reason": found["architectureReason"], "message": found["architectureError"], **found}
    return {"phase": "Ready", **found}


STAGING_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")  # a Job's name: one path component, no dot


def download(uri: str, cache: Path, *, endpoint: str | None = None, region: str | None = None,
             env: dict[str, str] | None = None, anonymous: bool = False, progress: Progress | None = None,
             capacity_bytes: int | None = None, staging_name: str | None = None, adapter: bool = False) -> dict[str, Any]:
    """Download `uri` into `cache` once; returns the final state (also in the progress file). `staging_name`: this
    writer's own staging directory (the Job's name), so concurrent writers of one revision never share files;
    without it `.staging/<key>/<revision>` (one writer at a time). `adapter`: a LoRA adapter (spec.adapters): it
    must hold adapter_config.json instead of config.json, and that file is reported instead of an architecture."""
    required = ADAPTER_CONFIG if adapter else "config.json"
    inspect = inspect_adapter if adapter else inspect_dir
    if staging_name is not None and not STAGING_NAME.fullmatch(staging_name):
        raise FetchError(EXIT_USAGE, f"--staging-name {staging_name[:80]!r}: expected a Job name (lower-case letters, "
                                     "digits, '-')")
    endpoint = effective_endpoint(uri, endpoint, env)
    source = parse_uri(uri, endpoint)
    progress = progress or Progress(None, {})
    progress.update(force=True, phase="Resolving", source=uri)
    client = client_for(source, endpoint, region, env, anonymous)
    revision, files = client.list_files()
    files = select_files(files)
    final = cache / source.key / revision
    total = sum(f.size for f in files)
    state = {"resolvedRevision": revision, "path": f"{source.key}/{revision}", "bytesTotal": total, "filesTotal": len(files)}
    _mark_cache_root(cache)
    checked = final.exists() or final.is_symlink()
    if checked:  # a copy to reuse: every file is hashed again first
        progress.update(force=True, phase="Verifying", bytesDone=0, **state)
        check_read_access(client, files)  # and first, that this Job's credentials may read it, not only another's
    copy_state, detail = _copy_problem(final, revision, files, progress)
    if copy_state == "ok":  # verified: its config.json says what the source's does (another ref's Job needs it too)
        if not checked:  # another Job's copy landed between the test above and the hashing: reused all the same
            check_read_access(client, files)
        _write_ref(cache, source, revision)
        progress.update(force=True, phase="Ready", bytesDone=total, filesDone=len(files), **state, **inspect(final))
        return progress.state
    if copy_state == "tampered":  # named where the operator reads it (progress line, termination message -> ModelReady)
        message = (f"the cached copy {source.key}/{revision} differs from what {uri} lists: {detail}; it was moved "
                   "aside and is fetched again. Something wrote to the model cache claim: check which pods mount it "
                   "writable (only the operator's download Job should)")
        print(f"model_fetch: {REASON_CACHE_TAMPERED}: {message}", file=sys.stderr, flush=True)
        progress.update(force=True, reason=REASON_CACHE_TAMPERED, message=message)
    if copy_state != "absent":  # tampered, or another file selection: moved out of sight in one step, then deleted
        _remove_tree(cache, final)
    if not any(f.path == required for f in files):
        what = "a PEFT LoRA adapter directory" if adapter else "a Hugging Face checkpoint directory"
        raise FetchError(EXIT_NO_CONFIG, f"{uri} has no {required} at its top level; point source.uri at {what}")
    _mark_source_dir(cache / ".staging", source.key)
    staging = cache / ".staging" / source.key / (f"{revision}.{staging_name}" if staging_name else revision)
    staged = _staged_bytes(staging)
    free = shutil.disk_usage(cache).free if capacity_bytes is None else capacity_bytes - _staged_bytes(cache)
    if total - staged > free:
        raise FetchError(EXIT_TOO_LARGE, f"the checkpoint takes {total / 1e9:.1f} GB but the cache has {(free + staged) / 1e9:.1f} GB "
                                         "for it; raise source.cache.size or name a larger claim in source.cache.claimName")
    progress.update(force=True, phase="Downloading", bytesDone=staged, filesDone=0, **state)
    headers_for = client.headers if isinstance(client, S3) else (lambda url: client.headers())
    # The files the architecture is read from come first; the operator reads it from the progress line, so
    # the plan does not wait for the weights (and the operator itself never calls the source).
    config_files = {"config.json", "model.safetensors.index.json", *QUANT_CONFIG_FILES}
    ordered = sorted(files, key=lambda f: (f.path not in config_files, f.size))
    # The architecture goes out once the config files are in. Without an index the weight bytes are the size of
    # model.safetensors: such a copy (and a listing of config files only) reports it with the Ready line below.
    early = not adapter and (not any(f.path == "model.safetensors" for f in files) or any(
        f.path == "model.safetensors.index.json" for f in files))
    for i, f in enumerate(ordered):
        dest = staging / f.path
        if not dest.exists():
            download_file(f, dest, headers_for, progress)
        progress.update(filesDone=i + 1)
        if early and f.path in config_files and i + 1 < len(ordered) and ordered[i + 1].path not in config_files:
            found = inspect_dir(staging)
            if "architecture" in found:
                progress.update(force=True, architecture=found["architecture"])
    summary = {"source": uri, "key": source.key, "revision": revision, "bytes": total, "files": _manifest(files),
               "verify": _checks(files, staging), "completedAt": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    (staging / MARKER).write_text(json.dumps(summary, sort_keys=True))
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staging, final)  # fails onto a non-empty directory: another writer's copy is there
    except OSError:
        if _copy_problem(final, revision, files)[0] != "ok":  # another Job finished the same revision first: keep theirs
            raise
        shutil.rmtree(staging, ignore_errors=True)
    _write_ref(cache, source, revision)
    progress.update(force=True, phase="Ready", bytesDone=total, **state, **inspect(final))
    return progress.state


# ---- cleanup of copies no backend uses ----

def _tree_bytes(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _remove_tree(cache: Path, path: Path) -> int:
    """Move `path` out of sight in one step (a reader sees the whole copy or none), then delete it; bytes freed."""
    if path.is_symlink():  # never followed
        path.unlink(missing_ok=True)
        return 0
    size = _tree_bytes(path)
    trash = cache / ".trash"
    trash.mkdir(exist_ok=True)
    target = trash / f"{path.name}.{os.urandom(6).hex()}"
    try:
        os.rename(path, target)
    except FileNotFoundError:  # another writer moved it aside first
        return 0
    shutil.rmtree(target, ignore_errors=True)
    return size


def parse_keep(keep: list[str]) -> set[tuple[str, str]]:
    """`<key>/refs/<revision>` strings (what serving pods load) -> {(key, ref name)}."""
    out = set()
    for item in keep:
        key, sep, name = item.rpartition("/refs/")
        if not sep or not key or not name or "/" in name:
            raise FetchError(EXIT_USAGE, f"--keep {item!r}: expected <key>/refs/<revision>")
        _safe_relative(f"{key}/refs/{name}")
        out.add((key, name))
    return out


def _read_marker(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_copy(path: Path, key: str) -> bool:
    """A complete copy this program made: a directory (not a link) whose marker names its own key and revision."""
    if path.is_symlink() or not path.is_dir():
        return False
    marker = _read_marker(path / MARKER)
    return marker is not None and marker.get("key") == key and marker.get("revision") == path.name


def _source_dirs(root: Path) -> list[tuple[str, Path]]:
    """(key, directory) of every source directory under `root` this program made: its SOURCE_MARKER names it, or
    (copies of operators before the marker) a copy in it does. Links are never followed, directories starting
    with "." at the top (.staging, .progress, .trash) are not walked."""
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if here == root:
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            continue
        key = here.relative_to(root).as_posix()
        source = _read_marker(here / SOURCE_MARKER)
        if (source is not None and source.get("key") == key) or any(_is_copy(here / d, key) for d in dirnames):
            found.append((key, here))
            dirnames[:] = []  # a key is never inside another key's directory
    return found


def _ref_target(link: Path) -> str | None:
    """The revision a ref link this program wrote points at (`../<revision>`); None for anything else."""
    if not link.is_symlink():
        return None
    target = os.readlink(link)
    revision = target[3:] if target.startswith("../") else ""
    return revision if revision and "/" not in revision and (valid_revision(revision) or revision.startswith("s3-")) else None


def _remove_empty_dirs(path: Path, stop: Path) -> None:
    """Remove `path` and its parents up to (not including) `stop` while they are empty: what a deletion left."""
    while path != stop and stop in path.parents:
        try:
            path.rmdir()
        except OSError:  # not empty (or gone): something else lives there
            return
        path = path.parent


def prune(cache: Path, keep: list[str]) -> dict[str, Any]:
    """Delete every complete copy, ref and partial download of the cache that no kept ref needs.

    Only what this program made is deleted, recognised by what it wrote, never by a folder's name: the cache root
    carries CACHE_ROOT_MARKER (pointed at any other folder, prune deletes nothing and says so); a source directory
    carries a SOURCE_MARKER naming its key; a copy is a directory whose MARKER names that key and its revision; a ref
    is a link to `../<revision>`; a partial download is a revision directory under a marked `.staging/<key>/`.
    Directories are removed only when a deletion here left them empty.

    A copy is kept when a kept ref points at it (two refs of one key can share a copy); the operator runs this only
    while no download Job writes to the cache, and keeps every ref that a backend's spec or a running serving pod
    names."""
    kept_refs = parse_keep(keep)
    kept = sorted(f"{k}/refs/{n}" for k, n in kept_refs)
    if _read_marker(cache / CACHE_ROOT_MARKER) is None:
        return {"phase": "Ready", "deleted": [], "freedBytes": 0, "kept": kept,
                "message": f"{cache} is not a model cache (no {CACHE_ROOT_MARKER}, which the download program writes "
                           "at the root of every cache it fills): nothing deleted"}
    kept_keys = {key for key, _ in kept_refs}
    deleted: list[str] = []
    freed = 0
    for key, here in _source_dirs(cache):
        refs = here / "refs"
        links = {link.name: _ref_target(link) for link in refs.iterdir()} if refs.is_dir() and not refs.is_symlink() else {}
        kept_copies = {links[name] for k, name in kept_refs if k == key and links.get(name)}
        for name, revision in sorted(links.items()):
            if revision is not None and (key, name) not in kept_refs:
                (refs / name).unlink()
                deleted.append(f"{key}/refs/{name}")
        for child in sorted(here.iterdir()):
            if _is_copy(child, key) and child.name not in kept_copies:
                freed += _remove_tree(cache, child)
                deleted.append(f"{key}/{child.name}")
        _remove_empty_dirs(refs, here)
        if [p.name for p in here.iterdir()] == [SOURCE_MARKER]:  # nothing of this source left
            (here / SOURCE_MARKER).unlink()
        _remove_empty_dirs(here, cache)
    staging = cache / ".staging"
    for key, here in _source_dirs(staging) if staging.is_dir() and not staging.is_symlink() else []:
        if key in kept_keys:
            continue  # a kept source's partial download: the next download resumes it
        source = _read_marker(here / SOURCE_MARKER)
        if source is None or source.get("key") != key:
            continue  # only a copy's marker found it: a complete copy under .staging is not ours to judge
        for child in sorted(here.iterdir()):
            if child.is_dir() and not child.is_symlink() and (valid_revision(child.name) or child.name.startswith("s3-")):
                freed += _remove_tree(cache, child)
                deleted.append(f".staging/{key}/{child.name}")
        if [p.name for p in here.iterdir()] == [SOURCE_MARKER]:
            (here / SOURCE_MARKER).unlink()
        _remove_empty_dirs(here, cache)
    _remove_empty_dirs(cache / ".trash", cache)
    return {"phase": "Ready", "deleted": deleted, "freedBytes": freed, "kept": kept}


def _termination(path: str | None, state: dict[str, Any]) -> None:
    if not path:
        return
    keep = {k: state[k] for k in ("phase", "reason", "message", "resolvedRevision", "path", "bytesTotal", "exitCode",
                                  "architecture", "architectureError", "architectureReason", "adapterConfig",
                                  "adapterConfigError") if k in state}
    text = json.dumps(keep, sort_keys=True)
    if len(text) > TERMINATION_LIMIT:
        keep.pop("architecture", None)
        keep["message"] = str(keep.get("message", ""))[:2048]
        text = json.dumps(keep, sort_keys=True)
    while len(text) > TERMINATION_LIMIT and keep["message"]:  # the kubelet cuts the rest: never an unparsable report
        keep["message"] = keep["message"][:len(keep["message"]) // 2]
        text = json.dumps(keep, sort_keys=True)
    if len(text) > TERMINATION_LIMIT and "adapterConfig" in keep:  # inspect_adapter's bounds make this unreachable
        keep.pop("adapterConfig")
        keep["adapterConfigError"] = f"the report of {ADAPTER_CONFIG} does not fit the termination message"
        text = json.dumps(keep, sort_keys=True)
    try:
        Path(path).write_text(text)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmbackend.model_fetch", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("download", help="download a source into the cache (token/keys from HF_TOKEN / AWS_* env)")
    d.add_argument("--source", required=True)
    d.add_argument("--cache", required=True, type=Path)
    d.add_argument("--endpoint")
    d.add_argument("--region")
    d.add_argument("--anonymous", action="store_true", help="s3: unsigned requests (public buckets)")
    d.add_argument("--progress-file")
    d.add_argument("--termination-log", default="/dev/termination-log" if os.path.exists("/dev/termination-log") else None)
    d.add_argument("--cache-capacity-bytes", type=int, help="bytes the cache may hold (default: the volume's free space)")
    d.add_argument("--adapter", action="store_true", help="a LoRA adapter: adapter_config.json instead of config.json, "
                                                           "reported as adapterConfig")
    d.add_argument("--staging-name", help="this writer's own staging directory under .staging/<key>/ (the download "
                                          "Job's name: its next pod resumes there); default: one shared by all")
    i = sub.add_parser("inspect", help="report the architecture of a checkpoint directory (pvc sources; exit 13: no "
                                       "config.json, 18: a config the reader cannot use)")
    i.add_argument("--dir", required=True, type=Path)
    i.add_argument("--termination-log", default="/dev/termination-log" if os.path.exists("/dev/termination-log") else None)
    c = sub.add_parser("prune", help="delete the copies, refs and partial downloads no kept ref needs")
    c.add_argument("--cache", required=True, type=Path)
    c.add_argument("--keep", action="append", default=[], help="<key>/refs/<revision> a backend or pod uses (repeatable)")
    c.add_argument("--termination-log", default="/dev/termination-log" if os.path.exists("/dev/termination-log") else None)
    args = parser.parse_args(argv)

    if args.command == "prune":
        try:
            report = prune(args.cache, args.keep)
        except FetchError as err:
            report = {"phase": "Failed", "reason": err.reason, "message": str(err)}
        if args.termination_log:
            summary = {k: v for k, v in report.items() if k != "deleted" and k != "kept"}
            summary["deletedCount"] = len(report.get("deleted", []))
            Path(args.termination_log).write_text(json.dumps(summary, sort_keys=True))
        print(json.dumps(report, sort_keys=True))
        return EXIT_OK if report["phase"] == "Ready" else EXIT_USAGE

    if args.command == "inspect":
        state = inspect_report(args.dir)
        _termination(args.termination_log, state)
        print(json.dumps(state, sort_keys=True))
        if state["phase"] == "Ready":
            return EXIT_OK
        return EXIT_NO_CONFIG if state["reason"] == REASONS[EXIT_NO_CONFIG] else EXIT_BAD_CONFIG

    progress = Progress(args.progress_file, {}, log=True)
    try:
        args.cache.mkdir(parents=True, exist_ok=True)
        try:
            state = download(args.source, args.cache, endpoint=args.endpoint, region=args.region,
                             anonymous=args.anonymous, progress=progress, capacity_bytes=args.cache_capacity_bytes,
                             staging_name=args.staging_name, adapter=args.adapter)
        except OSError as err:  # the cache volume (full, read-only, a name too long): a reason, not a traceback
            raise FetchError(EXIT_CACHE_ERROR, f"writing the model cache: {err}; check the cache claim "
                                               "(source.cache) and its free space; the next attempt resumes") from None
    except FetchError as err:
        progress.update(force=True, phase="Failed", reason=err.reason, message=str(err), exitCode=err.code)
        _termination(args.termination_log, progress.state)
        print(f"model_fetch: {err.reason}: {err}", file=sys.stderr)
        return err.code
    _termination(args.termination_log, state)
    print(log_line(state))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
