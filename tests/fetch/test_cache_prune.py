"""The cache cleanup program (`model_fetch prune`, what the operator's cleanup Job runs) as a process on a
cache the download program filled from the Hub-shaped server: old revisions and sources no backend uses
are deleted; a copy any kept ref points at is never touched."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_fetch

from llmbackend import model_fetch as mf

OLD = "fedcba9876543210fedcba9876543210fedcba98"
NEW = "1111111111111111111111111111111111111111"


def download(hub, cache: Path, uri: str) -> None:
    done = run_fetch("download", "--source", uri, "--cache", str(cache), "--endpoint", hub.endpoint)
    assert done.returncode == 0, done.stderr


def prune(cache: Path, *keep: str):
    args = ["prune", "--cache", str(cache), "--termination-log", str(cache.parent / "termination")]
    for k in keep:
        args += ["--keep", k]
    done = run_fetch(*args)
    return done.returncode, (json.loads(done.stdout) if done.stdout.strip() else None)


def files_of(copy: Path) -> dict[str, bytes]:
    return {p.relative_to(copy).as_posix(): p.read_bytes() for p in copy.rglob("*") if p.is_file()}


def test_prune_deletes_what_no_kept_ref_needs(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    top = mf.parse_uri("hf://acme/x", hub.endpoint).key.split("/")[0]  # hf-<endpoint digest>
    repo = hub.repos["acme/tiny-llama"]
    repo.revisions = ("main", "v1", "v2")
    download(hub, cache, "hf://acme/tiny-llama")       # refs/main -> OLD
    download(hub, cache, "hf://acme/tiny-llama@v1")    # refs/v1 -> OLD (the same copy)
    repo.sha = NEW                                      # a new commit, tagged v2
    download(hub, cache, "hf://acme/tiny-llama@v2")    # refs/v2 -> NEW
    hub.repos["acme/other"] = type(repo)(files=repo.files, sha="2" * 40)
    download(hub, cache, "hf://acme/other")
    key = cache / f"{top}/acme/tiny-llama"
    new_files = files_of(key / NEW)
    # Partial downloads: one of a kept source (resumable later), one of a source nobody names.
    (cache / f".staging/{top}/acme/tiny-llama" / ("3" * 40)).mkdir(parents=True)
    (cache / f".staging/{top}/acme/tiny-llama" / ("3" * 40) / "model.safetensors.part").write_bytes(b"x" * 100)
    (cache / f".staging/{top}/acme/gone" / ("4" * 40)).mkdir(parents=True)
    (cache / f".staging/{top}/acme/gone" / ("4" * 40) / "model.safetensors.part").write_bytes(b"x" * 100)

    # Backends use @v1 and @v2: main's ref goes, its copy stays (v1 points at it); acme/other goes entirely.
    code, report = prune(cache, f"{top}/acme/tiny-llama/refs/v1", f"{top}/acme/tiny-llama/refs/v2")
    assert code == 0, report
    assert sorted(p.name for p in (key / "refs").iterdir()) == ["v1", "v2"]
    assert (key / OLD / mf.MARKER).is_file() and (key / NEW / mf.MARKER).is_file()
    assert not (cache / f"{top}/acme/other").exists()
    assert (cache / f".staging/{top}/acme/tiny-llama").is_dir() and not (cache / f".staging/{top}/acme/gone").exists()
    assert report["freedBytes"] > 1_800_000 and f"{top}/acme/other/" + "2" * 40 in report["deleted"]
    assert json.loads((tmp_path / "termination").read_text())["phase"] == "Ready"

    # The last backend moves to v2: the old revision is deleted, the one in use is byte-for-byte intact.
    code, report = prune(cache, f"{top}/acme/tiny-llama/refs/v2")
    assert code == 0
    assert not (key / OLD).exists() and not (key / "refs/v1").exists()
    assert files_of(key / NEW) == new_files and (key / "refs/v2").resolve() == (key / NEW).resolve()
    assert not (cache / ".trash").exists()

    # Nothing kept: the cache is emptied (the claim itself stays; the operator never deletes it).
    code, _ = prune(cache)
    assert code == 0 and not any(p for p in cache.iterdir() if p.name != ".progress")


def test_prune_refuses_a_keep_outside_the_layout(tmp_path) -> None:
    cache = tmp_path / "cache"
    (cache / "hf/a/b" / OLD).mkdir(parents=True)
    (cache / "hf/a/b" / OLD / mf.MARKER).write_text("{}")
    for bad in ("hf/a/b", "hf/../../etc/refs/x", "/abs/refs/x"):
        code, report = prune(cache, bad)
        assert code == mf.EXIT_USAGE and report["phase"] == "Failed", bad
    assert (cache / "hf/a/b" / OLD / mf.MARKER).is_file()  # nothing deleted on bad input
