"""Issue 42, fourth attacker pass (independent): the download program's own-credentials check before it reuses a copy
another backend's token put in the namespace's cache (model_fetch.download, check_read_access).

Seat: a tenant who may only edit LLMBackends names a gated Hub repository that another team downloaded with its own
token. Method: the real download program (in-process, so that one interleaving can be forced) against the Hub-shaped
server, one directory standing for the shared cache claim.

Convention: a probe that breaks a claim asserts the safe behaviour and is a strict expected failure whose reason starts
with FINDING and its severity; a broken precondition raises PreconditionError, which the xfail marks do not take.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hubserver import HubServer, Repo

from llmbackend import model_fetch as mf

REPO = "acme/gated-llama"
GATED = f"hf://{REPO}"


class PreconditionError(Exception):
    """The scene of a probe could not be set (never the expected failure)."""


def precondition(ok: object, what: str) -> None:
    if not ok:
        raise PreconditionError(what)


@pytest.fixture
def gated_hub(hub: HubServer) -> HubServer:
    # Gated, and (as the Hub answers since 2024) its listing open to anyone; a tag v1 on the same commit as main.
    files = hub.repos["meta-llama/Llama-3.1-8B-Instruct"].files
    hub.repos[REPO] = Repo(files=files, gated=True, open_listing=True, revisions=("main", "v1"))
    return hub


def _team_a_copy(hub: HubServer, cache: Path, uri: str = GATED) -> dict:
    """Team A's download with its granted token: the copy every backend of the source would load."""
    state = mf.download(uri, cache, endpoint=hub.endpoint, env={"HF_TOKEN": HubServer.GOOD_TOKEN}, staging_name="llmb-fetch-a")
    precondition(state.get("phase") == "Ready", f"team A's download did not finish: {state}")
    return state


def _file_reads(hub: HubServer) -> list[str]:
    return [path for _, path, _ in hub.log if "/resolve/" in path]


def test_a_tenant_without_a_token_is_refused_a_gated_copy_already_in_the_cache(gated_hub, tmp_path):
    """HOLDS: the copy is there, the listing is open, the tenant's own Job (no token) is refused at the first-byte
    check, and the copy stays as it was (nothing deleted or re-linked)."""
    _team_a_copy(gated_hub, tmp_path)
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if ".progress" not in p.parts)
    with pytest.raises(mf.FetchError) as err:
        mf.download(GATED, tmp_path, endpoint=gated_hub.endpoint, env={}, staging_name="llmb-fetch-b")
    assert err.value.code == mf.EXIT_UNAUTHORIZED
    after = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if ".progress" not in p.parts)
    assert before == after


def test_a_token_not_granted_the_gated_repo_is_refused_the_copy(gated_hub, tmp_path):
    """HOLDS: a token of its own that the Hub knows but did not grant (403) is refused too."""
    _team_a_copy(gated_hub, tmp_path)
    with pytest.raises(mf.FetchError) as err:
        mf.download(GATED, tmp_path, endpoint=gated_hub.endpoint, env={"HF_TOKEN": HubServer.UNGRANTED_TOKEN},
                    staging_name="llmb-fetch-c")
    assert err.value.code == mf.EXIT_FORBIDDEN


def test_another_name_for_the_same_commit_is_checked_too(gated_hub, tmp_path):
    """HOLDS: the tenant asks for the tag v1 (same commit as team A's main, so the same copy directory, a new ref
    link); the check runs for it all the same, and no refs/v1 link is made."""
    _team_a_copy(gated_hub, tmp_path)
    with pytest.raises(mf.FetchError):
        mf.download(f"{GATED}@v1", tmp_path, endpoint=gated_hub.endpoint, env={}, staging_name="llmb-fetch-d")
    key = mf.parse_uri(GATED, gated_hub.endpoint).key
    assert not (tmp_path / key / "refs" / "v1").exists()


def test_a_tenant_without_a_copy_to_reuse_must_read_every_file_itself(gated_hub, tmp_path):
    """HOLDS: a tenant's own Job finds no copy: it must fetch every file itself (no check, but every
    file read is a real read with its own token), so without access it fails at the first file."""
    with pytest.raises(mf.FetchError) as err:
        mf.download(GATED, tmp_path, endpoint=gated_hub.endpoint, env={}, staging_name="llmb-fetch-e")
    assert err.value.code == mf.EXIT_UNAUTHORIZED
    key = mf.parse_uri(GATED, gated_hub.endpoint).key
    assert not (tmp_path / key / "refs" / "main").exists()


# Fixed (was a strict xfail): FINDING (low): download() decided whether to check read access with `final.exists()`,
# then _copy_problem found the copy 'ok' in a separate step; a copy that landed between the two was reused unchecked.
# A copy found 'ok' is now always checked with this Job's credentials.
def test_a_copy_that_lands_between_the_existence_test_and_the_reuse_is_still_checked(gated_hub, tmp_path, monkeypatch):
    """BREAKS: force the interleaving: team A's finished copy is renamed into place just after the tenant's Job looked
    for it (simulated by landing it when _copy_problem is entered), as two Jobs of one source do (model_fetch stages
    per Job and renames)."""
    team_a = tmp_path / "a"
    team_a.mkdir()
    _team_a_copy(gated_hub, team_a)
    key = mf.parse_uri(GATED, gated_hub.endpoint).key
    copies = [p for p in (team_a / key).iterdir() if p.name not in ("refs", mf.SOURCE_MARKER)]
    precondition(len(copies) == 1, f"one copy expected in team A's cache: {copies}")
    tenant = tmp_path / "shared"
    tenant.mkdir()
    original = mf._copy_problem

    def landing(final: Path, *args, **kwargs):
        if not final.exists():  # team A's rename lands now
            final.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(copies[0], final)
        return original(final, *args, **kwargs)

    monkeypatch.setattr(mf, "_copy_problem", landing)
    gated_hub.log.clear()
    outcome: object
    try:
        outcome = mf.download(GATED, tenant, endpoint=gated_hub.endpoint, env={}, staging_name="llmb-fetch-t")
    except mf.FetchError as err:
        outcome = err
    assert isinstance(outcome, mf.FetchError), (
        f"the tenant's Job (no token) reused the gated copy: {outcome}; file requests it made: {_file_reads(gated_hub)}")
