"""The cache cleanup program (`model_fetch prune`, what the operator's cleanup Job runs) as a process on a
cache the download program filled from the Hub-shaped server: old revisions and sources no backend uses
are deleted; a copy any kept ref points at is never touched; nothing the download program did not make is
deleted, whatever its folder's name (refs/, .staging/, empty folders), and a folder that is not a cache is
left as it is."""

from __future__ import annotations

import json
import os
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


def failed_download(hub, cache: Path, uri: str) -> None:
    """A partial download the program itself left in .staging (its largest file fails verification)."""
    hub.faults.corrupt.add("model-00001-of-00002.safetensors")
    try:
        done = run_fetch("download", "--source", uri, "--cache", str(cache), "--endpoint", hub.endpoint)
    finally:
        hub.faults.corrupt.discard("model-00001-of-00002.safetensors")
    assert done.returncode == mf.EXIT_VERIFY_FAILED, done.stderr


def tree(root: Path) -> dict[str, bytes | str | None]:
    """Every path under root: a file's bytes, a link's target, None for a directory."""
    return {p.relative_to(root).as_posix(): (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None)
            for p in root.rglob("*")}


def plant_foreign_things(root: Path) -> None:
    """What another team's folder (or a tenant writing into the cache) may hold: names the cleanup used to act on."""
    (root / "team/refs").mkdir(parents=True)
    (root / "team/refs/v1").write_text("a ref-named file that is someone's data\n")
    os.symlink("../data", root / "team/refs/latest")
    (root / ".staging/notes").mkdir(parents=True)
    (root / ".staging/notes/draft.part").write_text("someone's draft\n")
    (root / "empty/nested/deeper").mkdir(parents=True)
    (root / "hf/acme/lookalike" / OLD).mkdir(parents=True)  # a copy-shaped folder without the program's marker
    (root / "hf/acme/lookalike" / OLD / "config.json").write_text("{}")
    (root / "hf/acme/lookalike/refs").mkdir()
    os.symlink(f"../{OLD}", root / "hf/acme/lookalike/refs/main")


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
    # Partial downloads the program left: one of a kept source (resumable later), one of a source nobody names.
    repo.sha = "3" * 40
    failed_download(hub, cache, "hf://acme/tiny-llama@v2")
    repo.sha = NEW
    hub.repos["acme/gone"] = type(repo)(files=repo.files, sha="4" * 40)
    failed_download(hub, cache, "hf://acme/gone")
    assert (cache / f".staging/{top}/acme/gone" / ("4" * 40) / "config.json").is_file()

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
    assert code == 0 and sorted(p.name for p in cache.iterdir()) == [mf.CACHE_ROOT_MARKER]


def test_prune_of_a_folder_that_is_not_a_cache_deletes_nothing_and_says_so(tmp_path) -> None:
    # Another team's claim (say) with refs/, .staging/ and empty folders, and a copy-shaped folder.
    folder = tmp_path / "team-data"
    plant_foreign_things(folder)
    before = tree(folder)
    code, report = prune(folder)
    assert code == 0 and report["deleted"] == [] and report["freedBytes"] == 0
    assert "not a model cache" in report["message"] and "nothing deleted" in report["message"]
    assert "not a model cache" in json.loads((tmp_path / "termination").read_text())["message"]
    assert tree(folder) == before


def test_prune_in_a_cache_deletes_only_what_the_download_program_made(hub, tmp_path) -> None:
    cache = tmp_path / "cache"
    top = mf.parse_uri("hf://acme/x", hub.endpoint).key.split("/")[0]
    download(hub, cache, "hf://acme/tiny-llama")
    plant_foreign_things(cache)
    ours = (top, f".staging/{top}", mf.CACHE_ROOT_MARKER, ".progress")
    foreign = {k: v for k, v in tree(cache).items() if not k.startswith(ours)}
    code, report = prune(cache)  # no backend uses anything any more
    assert code == 0, report
    assert report["deleted"] == [f"{top}/acme/tiny-llama/refs/main", f"{top}/acme/tiny-llama/{OLD}"]
    assert not (cache / top).exists() and not (cache / f".staging/{top}").exists()  # emptied by the deletion: gone
    after = tree(cache)
    assert {k: v for k, v in after.items() if not k.startswith(ours)} == foreign


def test_prune_refuses_a_keep_outside_the_layout(tmp_path) -> None:
    cache = tmp_path / "cache"
    (cache / "hf/a/b" / OLD).mkdir(parents=True)
    (cache / "hf/a/b" / OLD / mf.MARKER).write_text("{}")
    for bad in ("hf/a/b", "hf/../../etc/refs/x", "/abs/refs/x"):
        code, report = prune(cache, bad)
        assert code == mf.EXIT_USAGE and report["phase"] == "Failed", bad
    assert (cache / "hf/a/b" / OLD / mf.MARKER).is_file()  # nothing deleted on bad input


def test_prune_recognises_copies_of_operators_before_the_source_marker(hub, tmp_path) -> None:
    # A cache an older operator filled: copies with their completion marker (which always named its key and
    # revision) but no source marker. Once a download has marked the root, the cleanup deletes those copies too.
    cache = tmp_path / "cache"
    top = mf.parse_uri("hf://acme/x", hub.endpoint).key.split("/")[0]
    download(hub, cache, "hf://acme/tiny-llama")
    hub.repos["acme/other"] = type(hub.repos["acme/tiny-llama"])(files=hub.repos["acme/tiny-llama"].files, sha="2" * 40)
    download(hub, cache, "hf://acme/other")
    for marker in cache.rglob(mf.SOURCE_MARKER):
        marker.unlink()
    code, report = prune(cache, f"{top}/acme/other/refs/main")
    assert code == 0, report
    assert report["deleted"] == [f"{top}/acme/tiny-llama/refs/main", f"{top}/acme/tiny-llama/{OLD}"]
    assert not (cache / f"{top}/acme/tiny-llama").exists()
    assert (cache / f"{top}/acme/other/refs/main" / mf.MARKER).is_file()


def test_prune_deletes_a_dropped_source_s_staging_of_each_job(hub, tmp_path) -> None:
    """Each download Job stages under its own name (`<revision>.<job>`): the cleanup deletes every one of them for a
    source nobody names, and keeps a kept source's (its Job resumes there)."""
    cache = tmp_path / "cache"
    top = mf.parse_uri("hf://acme/x", hub.endpoint).key.split("/")[0]
    hub.repos["acme/gone"] = type(hub.repos["acme/tiny-llama"])(files=hub.repos["acme/tiny-llama"].files, sha="4" * 40)
    hub.faults.corrupt.add("model-00001-of-00002.safetensors")
    try:
        for uri, job in (("hf://acme/gone", "llmb-fetch-a"), ("hf://acme/gone", "llmb-fetch-b"),
                         ("hf://acme/tiny-llama", "llmb-fetch-c")):
            done = run_fetch("download", "--source", uri, "--cache", str(cache), "--endpoint", hub.endpoint,
                             "--staging-name", job)
            assert done.returncode == mf.EXIT_VERIFY_FAILED, done.stderr
    finally:
        hub.faults.corrupt.discard("model-00001-of-00002.safetensors")
    gone = cache / f".staging/{top}/acme/gone"
    assert sorted(p.name for p in gone.iterdir()) == sorted([mf.SOURCE_MARKER, "4" * 40 + ".llmb-fetch-a",
                                                             "4" * 40 + ".llmb-fetch-b"])
    code, report = prune(cache, f"{top}/acme/tiny-llama/refs/main")
    assert code == 0, report
    assert not gone.exists()
    assert sorted(report["deleted"]) == [f".staging/{top}/acme/gone/{'4' * 40}.llmb-fetch-{j}" for j in "ab"]
    kept = cache / f".staging/{top}/acme/tiny-llama"
    assert [p.name for p in kept.iterdir() if p.name != mf.SOURCE_MARKER] == [f"{OLD}.llmb-fetch-c"]
