"""The download program (llmbackend.model_fetch) as a process against a Hub-shaped server and moto's S3.

Real servers on 127.0.0.1; the program runs as its own process like the download Job runs it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import checkpoint_files, run_fetch, safetensors
from hubserver import Repo

from llmbackend import model_fetch as mf

REPO = "acme/tiny-llama"
SHA = "fedcba9876543210fedcba9876543210fedcba98"


def fetch(hub, cache: Path, repo: str = REPO, *extra: str, env=None):
    return run_fetch("download", "--source", f"hf://{repo}", "--cache", str(cache), "--endpoint", hub.endpoint,
                     "--progress-file", str(cache.parent / "progress.json"),
                     "--termination-log", str(cache.parent / "termination"), *extra, env=env)


def key(hub, repo: str = REPO) -> str:
    """The source's directory in the cache: a custom endpoint is part of it."""
    return mf.parse_uri(f"hf://{repo}", hub.endpoint).key


def termination(cache: Path) -> dict:
    return json.loads((cache.parent / "termination").read_text())


def assert_copy_complete(cache: Path, key: str, revision: str) -> Path:
    final = cache / key / revision
    expected = {k: v for k, v in checkpoint_files().items() if not k.startswith("original/")}
    got = {str(p.relative_to(final)): p.read_bytes() for p in final.rglob("*") if p.is_file() and p.name != mf.MARKER}
    assert got == expected
    assert json.loads((final / mf.MARKER).read_text())["revision"] == revision
    assert not list((cache / ".staging").rglob("*.part"))
    return final


def downloaded(hub) -> int:
    """Files fetched from the Hub: a reuse's read-access check (check_read_access: the first byte, no redirect
    followed) is not a download."""
    return (len([r for r in hub.requests_for("/resolve/") if r[2].get("Range") != "bytes=0-0"])
            + len(hub.requests_for("/cdn/")))


def test_download_once_verified_with_progress_and_architecture(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    done = fetch(hub, cache)
    assert done.returncode == 0, done.stderr
    assert_copy_complete(cache, key(hub), SHA)
    ref = cache / key(hub) / "refs" / "main"
    assert os.readlink(ref) == f"../{SHA}" and (ref / mf.MARKER).is_file()  # the path serving pods load
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert progress["phase"] == "Ready" and progress["bytesDone"] == progress["bytesTotal"]
    assert progress["bytesTotal"] == sum(len(v) for k, v in checkpoint_files().items() if not k.startswith("original/"))
    message = termination(cache)
    assert message["resolvedRevision"] == SHA and message["path"] == f"{key(hub)}/{SHA}"
    # The architecture step read the downloaded config.json and index.
    assert message["architecture"]["numLayers"] == 32 and message["architecture"]["weightBytes"] == 1_800_000
    assert not hub.requests_for("consolidated")

    # A second run (another backend, same model and revision) finds the copy and downloads nothing: it only asks for
    # each file's first byte with its own credentials (check_read_access), and follows no redirect to the CDN.
    before, cdn = len(hub.requests_for("/resolve/")), len(hub.requests_for("/cdn/"))
    again = fetch(hub, cache)
    assert again.returncode == 0, again.stderr
    checks = hub.requests_for("/resolve/")[before:]
    assert len(checks) == len(progress_files := [k for k in checkpoint_files() if not k.startswith("original/")])
    assert all(headers.get("Range") == "bytes=0-0" for _, _, headers in checks), checks
    assert len(hub.requests_for("/cdn/")) == cdn and progress_files
    assert termination(cache)["phase"] == "Ready"


def test_revision_tag_resolves_to_the_commit(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    done = fetch(hub, cache, f"{REPO}@v1")
    assert done.returncode == 0, done.stderr
    assert os.readlink(cache / key(hub) / "refs" / "v1") == f"../{SHA}"
    assert_copy_complete(cache, key(hub), SHA)


@pytest.mark.parametrize("repo,token,code,reason,words", [
    ("meta-llama/Llama-3.1-8B-Instruct", None, mf.EXIT_UNAUTHORIZED, "SourceUnauthorized", ["gated", "HF_TOKEN", "secretRef"]),
    ("meta-llama/Llama-3.1-8B-Instruct", "hf_not_granted", mf.EXIT_FORBIDDEN, "SourceForbidden", ["license"]),
    ("acme/missing", "hf_good", mf.EXIT_NOT_FOUND, "SourceNotFound", ["RepoNotFound", "source.uri"]),
    ("acme/missing", None, mf.EXIT_UNAUTHORIZED, "SourceUnauthorized", ["does not exist"]),
    (REPO + "@no-such-branch", None, mf.EXIT_NOT_FOUND, "SourceNotFound", ["RevisionNotFound"]),
    ("acme/no-config", None, mf.EXIT_NO_CONFIG, "CheckpointConfigMissing", ["config.json"]),
])
def test_bad_sources_fail_with_a_reason_and_what_to_do(hub, tmp_path, repo, token, code, reason, words) -> None:
    cache = tmp_path / "cache"
    done = fetch(hub, cache, repo, env={"HF_TOKEN": token} if token else None)
    assert done.returncode == code, done.stderr
    message = termination(cache)
    assert message["reason"] == reason and message["phase"] == "Failed"
    for word in words:
        assert word in message["message"]
    assert not any(cache.rglob(mf.MARKER))


def test_gated_model_with_token_and_no_token_sent_to_the_cdn(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    done = fetch(hub, cache, "meta-llama/Llama-3.1-8B-Instruct", env={"HF_TOKEN": "hf_good"})
    assert done.returncode == 0, done.stderr
    assert all(h.get("Authorization") == "Bearer hf_good" for _, _, h in hub.requests_for("/resolve/"))
    cdn = hub.requests_for("/cdn/")
    assert cdn and all("Authorization" not in h for _, _, h in cdn)


def test_larger_than_the_cache_is_refused_before_downloading(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    done = fetch(hub, cache, REPO, "--cache-capacity-bytes", "1000000")
    assert done.returncode == mf.EXIT_TOO_LARGE
    assert "source.cache" in termination(cache)["message"]
    assert not hub.requests_for("/resolve/")


def test_hash_mismatch_is_rejected_and_nothing_is_published(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    hub.faults.corrupt.add("model-00001-of-00002.safetensors")  # the largest file: fetched last
    done = fetch(hub, cache)
    assert done.returncode == mf.EXIT_VERIFY_FAILED
    assert "sha256" in termination(cache)["message"]
    assert not (cache / key(hub) / SHA).exists()
    assert not list(cache.rglob("model-00001-of-00002.safetensors*"))  # the bad bytes are gone
    # The next attempt (the Job's retry) gets good bytes and keeps the files already verified.
    hub.faults.corrupt.clear()
    shard2_gets = len(hub.requests_for("model-00002"))
    assert shard2_gets
    again = fetch(hub, cache)
    assert again.returncode == 0, again.stderr
    assert_copy_complete(cache, key(hub), SHA)
    assert len(hub.requests_for("model-00002")) == shard2_gets


def test_dropped_connection_resumes_with_a_range_request(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    hub.faults.cut_after["model-00001-of-00002.safetensors"] = 400_000
    done = fetch(hub, cache)
    assert done.returncode == 0, done.stderr
    assert_copy_complete(cache, key(hub), SHA)
    ranges = [h.get("Range") for _, _, h in hub.requests_for("/cdn/acme/tiny-llama/model-00001")]
    assert ranges == [None, "bytes=400000-"]


def test_killed_download_resumes_in_the_next_process(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    hub.faults.hold_after["model-00001-of-00002.safetensors"] = 700_000
    proc = run_fetch("download", "--source", f"hf://{REPO}", "--cache", str(cache), "--endpoint", hub.endpoint, wait=False)
    try:
        assert hub.faults.held.wait(60), "the download never reached the held file"
        part = cache / ".staging" / key(hub) / SHA / "model-00001-of-00002.safetensors.part"
        for _ in range(600):  # until the client has written what the server sent (bounded: 60 s)
            if part.exists() and part.stat().st_size == 700_000:
                break
            time.sleep(0.1)
        assert part.stat().st_size == 700_000
        assert not (cache / key(hub) / SHA).exists()  # nothing visible where a server loads
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        hub.faults.release.set()
    done = fetch(hub, cache)
    assert done.returncode == 0, done.stderr
    assert_copy_complete(cache, key(hub), SHA)
    ranges = [h.get("Range") for _, _, h in hub.requests_for("/cdn/acme/tiny-llama/model-00001")]
    assert ranges[-1] == "bytes=700000-"


def test_two_jobs_writing_one_copy_at_once_stage_apart_and_the_later_keeps_the_first_s(hub, tmp_path) -> None:
    """Two download Jobs of one source (backends with different Secrets, or none) run at once into one claim. Each
    stages under its own name; the first rename wins, the later writer finds that copy, checks it and deletes its
    own. With one shared staging directory, B resumed A's half-written file and renamed it into place while A still
    held it open, and A's remaining bytes landed in the published copy."""
    cache = tmp_path / "cache"
    hub.faults.pause_after["model-00001-of-00002.safetensors"] = 700_000
    argv = ("download", "--source", f"hf://{REPO}", "--cache", str(cache), "--endpoint", hub.endpoint)
    first = run_fetch(*argv, "--staging-name", "llmb-fetch-a", "--termination-log", str(tmp_path / "a"), wait=False)
    try:
        assert hub.faults.held.wait(60), "the first download never reached the paused file"
        for _ in range(600):  # until the first writer has what the server sent so far (bounded: 60 s)
            staged = list((cache / ".staging").rglob("model-00001-of-00002.safetensors.part"))
            if staged and staged[0].stat().st_size == 700_000:
                break
            time.sleep(0.1)
        assert staged[0].parent.name == f"{SHA}.llmb-fetch-a"
        second = run_fetch(*argv, "--staging-name", "llmb-fetch-b", "--termination-log", str(tmp_path / "b"))
        assert second.returncode == 0, second.stderr
    finally:
        hub.faults.release.set()
        out, err = first.communicate(timeout=60)
    final = assert_copy_complete(cache, key(hub), SHA)  # the published copy, byte for byte what the source lists
    assert first.returncode == 0, err
    assert json.loads((tmp_path / "a").read_text())["phase"] == "Ready"
    assert (cache / key(hub) / "refs" / "main").resolve() == final.resolve()
    # Nothing of either writer is left behind: the later one deleted its own staging directory.
    assert [p.name for p in (cache / ".staging" / key(hub)).iterdir()] == [mf.SOURCE_MARKER]
    assert not [p for p in (cache / key(hub)).rglob("*.tmp")]


def test_a_staging_name_that_is_not_a_job_name_is_refused(hub, tmp_path) -> None:
    for bad in ("../x", "a/b", ".hidden", "A" * 70, "x.y"):
        done = fetch(hub, tmp_path / "cache", REPO, "--staging-name", bad)
        assert done.returncode == mf.EXIT_USAGE and "--staging-name" in done.stderr
    assert not (tmp_path / "cache" / ".staging").exists()


def test_the_architecture_goes_out_before_the_weights(hub, tmp_path) -> None:
    # The operator plans from this progress line: it never calls the source itself.
    done = fetch(hub, tmp_path / "cache")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    first = next(line for line in lines if "architecture" in line)
    assert first["phase"] == "Downloading" and first["bytesDone"] < first["bytesTotal"]
    assert first["architecture"]["numLayers"] == 32 and first["architecture"]["weightBytes"] == 1_800_000


def write_checkpoint(directory: Path, files: dict[str, bytes] | None = None) -> Path:
    for name, data in (checkpoint_files() if files is None else files).items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    return directory


def inspect(directory: Path, termination: Path):
    """The inspector as its own process, like the pvc inspector Job runs it; (exit code, termination message)."""
    done = run_fetch("inspect", "--dir", str(directory), "--termination-log", str(termination))
    assert done.returncode == 0 or "Failed" in done.stdout, done.stderr
    return done.returncode, json.loads(termination.read_text())


def test_inspect_a_pvc_directory(tmp_path) -> None:
    model = write_checkpoint(tmp_path / "llama")
    code, report = inspect(model, tmp_path / "termination")
    assert code == 0 and report["phase"] == "Ready"
    arch = report["architecture"]
    # Shape from config.json, exact weight bytes from the index's metadata.total_size.
    assert (arch["numLayers"], arch["numKeyValueHeads"], arch["weightBytes"]) == (32, 8, 1_800_000)
    assert "checkpointQuantization" not in arch


def test_inspect_reads_a_separate_quantization_config(tmp_path) -> None:
    # NVIDIA ModelOpt exports put the quantization next to config.json (hf_quant_config.json).
    model = write_checkpoint(tmp_path / "fp8")
    (model / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt", "version": "0.29.0"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}}))
    code, report = inspect(model, tmp_path / "termination")
    assert code == 0 and report["architecture"]["checkpointQuantization"] == "fp8"
    # A quantization_config inside config.json wins over the separate file.
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": "awq", "bits": 4}}))
    assert inspect(model, tmp_path / "termination")[1]["architecture"]["checkpointQuantization"] == "awq"


@pytest.mark.parametrize("damage,exit_code,reason,hint", [
    ("no-config", mf.EXIT_NO_CONFIG, "CheckpointConfigMissing", "source.pvc.path"),
    ("no-dir", mf.EXIT_NO_CONFIG, "CheckpointConfigMissing", "does not exist"),
    ("unknown-model-type", mf.EXIT_BAD_CONFIG, "UnsupportedModelType", "spec.model.architecture"),
    ("bad-json", mf.EXIT_BAD_CONFIG, "InvalidCheckpointConfig", "not valid JSON"),
    ("bad-index", mf.EXIT_BAD_CONFIG, "InvalidCheckpointConfig", "model.safetensors.index.json"),
    ("no-layers", mf.EXIT_BAD_CONFIG, "InvalidCheckpointConfig", "num_hidden_layers"),
])
def test_inspect_reports_a_bad_checkpoint_with_reason_and_what_to_do(tmp_path, damage, exit_code, reason, hint) -> None:
    model = write_checkpoint(tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    if damage == "no-config":
        (model / "config.json").unlink()
    elif damage == "no-dir":
        model = tmp_path / "elsewhere"
    elif damage == "unknown-model-type":
        (model / "config.json").write_text(json.dumps({**config, "model_type": "rwkv7"}))
    elif damage == "bad-json":
        (model / "config.json").write_text("{not json")
    elif damage == "bad-index":
        (model / "model.safetensors.index.json").write_text('{"metadata": ')
    elif damage == "no-layers":
        (model / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "num_hidden_layers"}))
    code, report = inspect(model, tmp_path / "termination")
    assert code == exit_code
    assert (report["phase"], report["reason"]) == ("Failed", reason)
    assert hint in report["message"] and "architecture" not in report


# ---- S3-compatible store ----

def _s3_put(endpoint: str, path: str, data: bytes = b"") -> None:
    url = f"{endpoint}/{path}"
    headers = mf.sigv4_headers("PUT", url, "us-east-1", "test", "test")
    headers["Content-Type"] = "application/octet-stream"  # urllib's default (a form) would be parsed, not stored
    urllib.request.urlopen(urllib.request.Request(url, data=data, method="PUT", headers=headers), timeout=30).close()


S3_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}


@pytest.fixture
def bucket(s3_endpoint, request):
    name = "models-" + hashlib.sha1(request.node.name.encode()).hexdigest()[:16]
    _s3_put(s3_endpoint, name)
    for path, data in checkpoint_files().items():
        _s3_put(s3_endpoint, f"{name}/llama/{path}", data)
    _s3_put(s3_endpoint, f"{name}/empty/readme.txt", b"nothing here")
    return name


def s3_fetch(endpoint: str, cache: Path, uri: str, env=S3_ENV):
    return run_fetch("download", "--source", uri, "--cache", str(cache), "--endpoint", endpoint,
                     "--termination-log", str(cache.parent / "termination"), env=env)


def test_s3_download_verified_and_shared(s3_endpoint, bucket, tmp_path) -> None:
    cache = tmp_path / "cache"
    done = s3_fetch(s3_endpoint, cache, f"s3://{bucket}/llama")
    assert done.returncode == 0, done.stderr
    message = termination(cache)
    revision = message["resolvedRevision"]
    assert revision.startswith("s3-")
    assert_copy_complete(cache, mf.parse_uri(f"s3://{bucket}/llama", s3_endpoint).key, revision)
    assert message["architecture"]["vocabSize"] == 128_256
    again = s3_fetch(s3_endpoint, cache, f"s3://{bucket}/llama")
    assert again.returncode == 0 and termination(cache)["resolvedRevision"] == revision


def test_s3_a_tampered_copy_is_fetched_again(s3_endpoint, bucket, tmp_path) -> None:
    # An S3 copy is checked against the objects' MD5 ETags on reuse: a same-size edit of a shard is named and fixed.
    cache = tmp_path / "cache"
    uri = f"s3://{bucket}/llama"
    assert s3_fetch(s3_endpoint, cache, uri).returncode == 0
    revision = termination(cache)["resolvedRevision"]
    key = mf.parse_uri(uri, s3_endpoint).key
    marker = json.loads((cache / key / revision / mf.MARKER).read_text())
    assert marker["verify"]["config.json"][0] == "md5"  # what reuse checks it against: the listing's ETag
    _same_size_edit(cache / key / revision / "model-00002-of-00002.safetensors")
    again = s3_fetch(s3_endpoint, cache, uri)
    assert again.returncode == 0, again.stderr
    report = termination(cache)
    assert report["reason"] == mf.REASON_CACHE_TAMPERED
    assert "model-00002-of-00002.safetensors: MD5 differs from the object's ETag" in report["message"]
    assert_copy_complete(cache, key, revision)


@pytest.mark.parametrize("uri_suffix,env,code,reason", [
    ("/llama", {}, mf.EXIT_NO_CREDENTIALS, "SourceCredentialsMissing"),
    ("/no-such-prefix", S3_ENV, mf.EXIT_NOT_FOUND, "SourceNotFound"),
    ("/empty", S3_ENV, mf.EXIT_NO_CONFIG, "CheckpointConfigMissing"),
])
def test_s3_bad_sources(s3_endpoint, bucket, tmp_path, uri_suffix, env, code, reason) -> None:
    cache = tmp_path / "cache"
    done = s3_fetch(s3_endpoint, cache, f"s3://{bucket}{uri_suffix}", env=env)
    assert done.returncode == code, done.stderr
    assert termination(cache)["reason"] == reason


def test_s3_missing_bucket(s3_endpoint, tmp_path) -> None:
    cache = tmp_path / "cache"
    done = s3_fetch(s3_endpoint, cache, "s3://no-such-bucket-here/llama")
    assert done.returncode == mf.EXIT_NOT_FOUND
    assert "NoSuchBucket" in termination(cache)["message"]


def test_sigv4_matches_the_aws_documented_example() -> None:
    """AWS S3 API reference, "Signature Calculations for the Authorization Header", example GET Object."""
    import datetime
    now = datetime.datetime(2013, 5, 24, tzinfo=datetime.UTC)
    h = mf.sigv4_headers("GET", "https://examplebucket.s3.amazonaws.com/test.txt", "us-east-1",
                         "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", now=now,
                         payload_hash=hashlib.sha256(b"").hexdigest(), extra={"Range": "bytes=0-9"})
    assert h["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")


# ---- hostile endpoints: a listing is input from whoever runs the endpoint ----

def _written(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.mark.parametrize("sha", [f"../../meta-llama/Llama-3.1-8B/{SHA}", "../../../escaped", "..", "a/b", SHA[:39] + "\0"])
def test_a_hostile_listing_commit_writes_nothing_and_marks_nothing_complete(hub, tmp_path, sha) -> None:
    # The probe: a listing whose `sha` climbs out of its key planted a complete copy at another source's key.
    hub.repos["evil/model"] = type(hub.repos[REPO])(files=checkpoint_files(), sha=sha, hostile=True)
    cache = tmp_path / "cache"
    done = fetch(hub, cache, "evil/model")
    assert done.returncode == mf.EXIT_VERIFY_FAILED, done.stderr
    assert "not a commit id" in termination(cache)["message"]
    outside = {p for p in _written(tmp_path) if not p.startswith(("cache/.progress", "progress.json", "termination"))}
    assert outside == set()  # nothing at all: not at its own key, not at another's, not outside the cache
    assert not hub.requests_for("/resolve/")


def test_a_planted_copy_is_not_served_to_the_genuine_source(hub, tmp_path) -> None:
    # A copy at the genuine key with a marker but other bytes (planted, or an older operator's hostile write):
    # the genuine download does not trust the marker, it checks the copy against its own listing.
    cache = tmp_path / "cache"
    assert fetch(hub, cache).returncode == 0
    final = cache / key(hub) / SHA
    (final / "config.json").write_bytes(b'{"tag": "EVIL"}' + b" " * (len(checkpoint_files()["config.json"]) - 15))
    (final / "modeling_evil.py").write_text("import os\n")
    again = fetch(hub, cache)
    assert again.returncode == 0, again.stderr
    assert_copy_complete(cache, key(hub), SHA)
    assert b"EVIL" not in (cache / key(hub) / "refs" / "main" / "config.json").read_bytes()


def _same_size_edit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    at = len(data) // 2
    data[at] ^= 0x01  # one bit: the size stays
    path.write_bytes(bytes(data))


def _replace_by_link(path: Path) -> None:
    twin = path.parent.parent / "elsewhere" / path.name  # the same bytes, but a link a writer can re-point
    twin.parent.mkdir(exist_ok=True)
    twin.write_bytes(path.read_bytes())
    path.unlink()
    os.symlink(twin, path)


@pytest.mark.parametrize("tamper,named", [
    (lambda copy: _same_size_edit(copy / "config.json"), "config.json: git blob id differs"),
    (lambda copy: _same_size_edit(copy / "model-00002-of-00002.safetensors"),
     "model-00002-of-00002.safetensors: sha256 differs"),
    (lambda copy: (copy / "modeling_evil.py").write_text("import os\n"), "modeling_evil.py: not in the listing"),
    (lambda copy: _replace_by_link(copy / "config.json"), "config.json is a symbolic link"),
], ids=["config-same-size", "safetensors-same-size", "extra-file", "symlink"])
def test_a_tampered_copy_is_detected_named_moved_aside_and_fetched_again(hub, tmp_path, tamper, named) -> None:
    # Someone with a writable mount of the cache claim changes a complete copy; the next download of the same
    # source (another backend's Job) hashes every file again instead of trusting the marker and the sizes.
    cache = tmp_path / "cache"
    assert fetch(hub, cache).returncode == 0
    final = cache / key(hub) / SHA
    tamper(final)
    before = len(hub.requests_for("/resolve/"))
    again = fetch(hub, cache)
    assert again.returncode == 0, again.stderr
    report = termination(cache)
    assert report["phase"] == "Ready" and report["reason"] == mf.REASON_CACHE_TAMPERED
    assert named in report["message"] and "moved aside and is fetched again" in report["message"]
    # The operator reads the running pod's last log line: the reason is in the lines the program prints.
    lines = [json.loads(line) for line in again.stdout.splitlines() if line.startswith("{")]
    assert any(line.get("reason") == mf.REASON_CACHE_TAMPERED and named in line["message"] for line in lines)
    assert mf.REASON_CACHE_TAMPERED in again.stderr
    assert len(hub.requests_for("/resolve/")) > before  # fetched again
    assert_copy_complete(cache, key(hub), SHA)  # byte for byte what the source lists, nothing else
    assert not any(p.is_symlink() for p in final.rglob("*"))
    assert not (cache / ".trash").exists() or not any((cache / ".trash").iterdir())


def test_an_intact_copy_is_rehashed_and_reused(hub, tmp_path) -> None:
    # Reuse reads every byte again (the check above); an intact copy passes and nothing is fetched.
    cache = tmp_path / "cache"
    assert fetch(hub, cache).returncode == 0
    before = downloaded(hub)
    again = fetch(hub, cache)
    assert again.returncode == 0 and downloaded(hub) == before
    assert "reason" not in termination(cache)
    lines = [json.loads(line) for line in again.stdout.splitlines() if line.startswith("{")]
    phases = [line["phase"] for line in lines]
    assert "Verifying" in phases and phases[-1] == "Ready" and "Downloading" not in phases
    # Another ref of the same commit (its own Job) reuses the copy and still reports the architecture, read from
    # the copy once it passed (a backend without a preset is planned from it).
    tagged = fetch(hub, cache, f"{REPO}@v1")
    assert tagged.returncode == 0 and downloaded(hub) == before
    assert termination(cache)["architecture"]["numLayers"] == 32


def test_a_marker_edited_with_the_file_does_not_pass(hub, tmp_path) -> None:
    # The marker is in the cache too: a writer that edits a file and the hash the marker records for it is still
    # caught, because a hash the source lists is checked against the listing, never against the marker.
    cache = tmp_path / "cache"
    assert fetch(hub, cache).returncode == 0
    final = cache / key(hub) / SHA
    _same_size_edit(final / "model-00001-of-00002.safetensors")
    marker = json.loads((final / mf.MARKER).read_text())
    forged = hashlib.sha256((final / "model-00001-of-00002.safetensors").read_bytes()).hexdigest()
    marker["files"]["model-00001-of-00002.safetensors"][1] = forged
    marker["verify"]["model-00001-of-00002.safetensors"] = ["local-sha256", forged]
    (final / mf.MARKER).write_text(json.dumps(marker))
    again = fetch(hub, cache)
    assert again.returncode == 0, again.stderr
    assert_copy_complete(cache, key(hub), SHA)


def test_the_commit_of_the_uri_is_checked_against_the_listing(hub, tmp_path) -> None:
    hub.repos["acme/liar"] = type(hub.repos[REPO])(files=checkpoint_files(), sha="1" * 40, hostile=True)
    cache = tmp_path / "cache"
    done = fetch(hub, cache, f"acme/liar@{'2' * 40}")
    assert done.returncode == mf.EXIT_VERIFY_FAILED, done.stderr
    assert "answered with commit" in termination(cache)["message"]
    assert not any(cache.rglob(mf.MARKER))


@pytest.mark.parametrize("uri", ["hf://org/name@..", "hf://org/name@.", "hf://org/name@a..b", "hf://org/name@main.lock",
                                 "hf://org/name@.hidden", "hf://org/name@x/../../y", "hf://../name", "hf://org/..",
                                 "s3://bucket/a/../../b", "s3://bucket/a/./b", "hf://org/name@a%00b"])
def test_unsafe_revisions_and_paths_in_the_uri_are_refused_before_any_request(hub, tmp_path, uri) -> None:
    cache = tmp_path / "cache"
    done = run_fetch("download", "--source", uri, "--cache", str(cache), "--endpoint", hub.endpoint,
                     "--termination-log", str(tmp_path / "termination"))
    assert done.returncode == mf.EXIT_USAGE, done.stderr
    assert json.loads((tmp_path / "termination").read_text())["reason"] == "InvalidSource"
    assert not hub.log and _written(cache) == set()


def test_one_uri_through_two_endpoints_gets_two_copies(hub, tmp_path) -> None:
    # The probe: the endpoint was not part of the cache key, so whoever downloaded first decided what every
    # backend of the namespace loaded for that URI.
    from hubserver import HubServer, Repo
    cache = tmp_path / "cache"
    with HubServer() as mirror:
        files = {**checkpoint_files(), "config.json": checkpoint_files()["config.json"].replace(b"{", b'{"tag": "EVIL",', 1)}
        mirror.repos[REPO] = Repo(files=files, sha=SHA)
        assert fetch(mirror, cache).returncode == 0
        assert fetch(hub, cache).returncode == 0
        genuine = cache / key(hub) / "refs" / "main" / "config.json"
        assert key(hub) != key(mirror)
        assert b"EVIL" not in genuine.read_bytes()
        assert b"EVIL" in (cache / key(mirror) / "refs" / "main" / "config.json").read_bytes()
    assert mf.parse_uri(f"hf://{REPO}").key == f"hf/{REPO}"  # the default Hub keeps the key older copies have
    assert mf.parse_uri(f"hf://{REPO}", "https://huggingface.co/").key == f"hf/{REPO}"


@pytest.mark.parametrize("extra", [{"config.json/x": b"{}"}, {"sub": b"1", "sub/file": b"2"}])
def test_a_listing_naming_a_file_and_a_directory_alike_is_refused(hub, tmp_path, extra) -> None:
    hub.repos["evil/clash"] = type(hub.repos[REPO])(files={**checkpoint_files(), **extra})
    cache = tmp_path / "cache"
    done = fetch(hub, cache, "evil/clash")
    assert done.returncode == mf.EXIT_VERIFY_FAILED, done.stderr  # a reason, not a traceback
    assert "both a file and a directory" in termination(cache)["message"]
    assert not any(cache.rglob(mf.MARKER))


def test_a_cache_that_cannot_be_written_is_a_reason_not_a_traceback(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / ".staging").write_text("a file where the program needs a directory")
    done = fetch(hub, cache)
    assert done.returncode == mf.EXIT_CACHE_ERROR and "Traceback" not in done.stderr, done.stderr
    assert termination(cache)["reason"] == "ModelCacheError"


def _adapter_files(base: str = "meta-llama/Llama-3.1-8B-Instruct", rank: int = 16) -> dict[str, bytes]:
    config = {"peft_type": "LORA", "base_model_name_or_path": base, "r": rank, "lora_alpha": 32,
              "target_modules": ["q_proj", "v_proj"], "bias": "none", "task_type": "CAUSAL_LM", "lora_dropout": 0.05}
    weights = safetensors("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", 4096, 3)
    return {"adapter_config.json": json.dumps(config).encode(), "adapter_model.safetensors": weights,
            "README.md": b"# sql adapter\n"}


def test_an_adapter_is_downloaded_once_and_its_config_reported(hub, tmp_path) -> None:
    hub.repos["acme/sql-lora"] = Repo(files=_adapter_files(), sha="0123456789abcdef0123456789abcdef01234567")
    cache = tmp_path / "cache"
    done = fetch(hub, cache, "acme/sql-lora", "--adapter")
    assert done.returncode == 0, done.stderr
    message = termination(cache)
    assert message["phase"] == "Ready" and "architecture" not in message
    assert message["adapterConfig"] == {"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct",
                                        "r": 16, "target_modules": ["q_proj", "v_proj"], "bias": "none"}
    final = cache / key(hub, "acme/sql-lora") / "0123456789abcdef0123456789abcdef01234567"
    assert (final / "adapter_model.safetensors").is_file() and (final / mf.MARKER).is_file()
    before = downloaded(hub)
    assert fetch(hub, cache, "acme/sql-lora", "--adapter").returncode == 0  # reused, reported again
    assert downloaded(hub) == before and termination(cache)["adapterConfig"]["r"] == 16


def test_an_adapter_source_without_adapter_config_is_refused(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    done = fetch(hub, cache, REPO, "--adapter")  # a full checkpoint is not an adapter
    assert done.returncode == mf.EXIT_NO_CONFIG
    assert "no adapter_config.json" in termination(cache)["message"]
    assert "PEFT LoRA adapter" in termination(cache)["message"]


def test_a_hostile_adapter_config_does_not_crowd_out_the_report(hub, tmp_path) -> None:
    """Issue 46: every field of adapter_config.json the program reports is bounded, so the termination message is
    whole JSON (the kubelet keeps 4 KiB of it): a list of modules too long is named in part and counted (F1), a
    field of a size or type no PEFT file has is an invalid config naming it (F2)."""
    from llmbackend.api import adapters as api_adapters
    from llmbackend.api.v1alpha1 import LLMBackendSpec

    base = LLMBackendSpec.model_validate({"model": {"preset": "llama-3.1-8b"}, "adapters": [
        {"name": "big", "source": {"uri": "hf://acme/big-lora"}}]})
    cases = {
        "modules": ({"r": 8, "target_modules": ["q_proj"] + [f"m{i:03d}" + "m" * 100 for i in range(400)]},
                    api_adapters.ADAPTER_MODULES_UNSUPPORTED),
        "base": ({"r": 8, "target_modules": ["q_proj"], "base_model_name_or_path": "x" * 10000},
                 api_adapters.ADAPTER_CONFIG_INVALID),
        "dora": ({"r": 8, "target_modules": ["q_proj"], "use_dora": list(range(3000))},
                 api_adapters.ADAPTER_CONFIG_INVALID),
    }
    for name, (config, reason) in cases.items():
        files = _adapter_files()
        files["adapter_config.json"] = json.dumps(config).encode()
        hub.repos["acme/big-lora"] = Repo(files=files, sha=f"{len(name):040x}")
        cache = tmp_path / name
        assert fetch(hub, cache, "acme/big-lora", "--adapter").returncode == 0
        text = (cache.parent / "termination").read_text()
        assert len(text.encode()) <= mf.TERMINATION_LIMIT, (name, len(text))
        message = json.loads(text)
        assert message["phase"] == "Ready"
        reported = message.get("adapterConfig", message.get("adapterConfigError"))
        result = api_adapters.check_adapter("big", reported, base)
        assert (result.ok, result.reason) == (False, reason), (name, result)


def test_a_json_file_nested_too_deep_is_a_clear_error_not_a_crash(tmp_path) -> None:
    """A hostile adapter_config.json (or config.json) nested deeper than the parser recurses: the report says the file
    is not valid JSON (an attacker's probe: RecursionError escaped the reader and crashed the Job on every retry)."""
    (tmp_path / mf.ADAPTER_CONFIG).write_text("[" * 200_000 + "]" * 200_000)
    found = mf.inspect_adapter(tmp_path)
    assert "adapterConfigError" in found and "not valid JSON" in found["adapterConfigError"], found
