"""Child names of different backends cannot collide: every child is <backend name><suffix>, no backend name ends with
a suffix (the CRD's CEL rule), and no suffix ends with another. Issue 24: `coll` and `coll-epp` both applied
Deployment coll-epp."""

from __future__ import annotations

import functools
import itertools
import re

import pytest

from llmbackend.api import crdgen
from llmbackend.api.v1alpha1 import CHILD_NAME_SUFFIXES
from llmbackend.render.workloads import BackendRef, owned_names


@functools.cache
def _name_rule() -> str:
    rules = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    (rule,) = [r["rule"] for r in rules if "-epp" in r["rule"]]
    return rule


def _cel_allows(name: str) -> bool:
    """The rule is `!self.metadata.name.matches('<re>')`; CEL's matches() is RE2 search, as Python's re.search."""
    pattern = re.fullmatch(r"!self\.metadata\.name\.matches\('(.*)'\)", _name_rule()).group(1)
    return re.search(pattern, name) is None


def test_every_child_name_is_the_backend_name_plus_a_known_suffix():
    for kind, name in owned_names(BackendRef("coll", "ns", "uid")):
        assert name == "coll" or name.removeprefix("coll") in CHILD_NAME_SUFFIXES, (kind, name)


def test_no_suffix_ends_with_another():
    for a, b in itertools.permutations(CHILD_NAME_SUFFIXES, 2):
        assert not a.endswith(b), (a, b)


@pytest.mark.parametrize("name", ["coll-epp", "x-activator", "x-serving", "x-model-repo", "x-launcher"])
def test_names_ending_with_a_child_suffix_are_refused(name):
    assert not _cel_allows(name)


@pytest.mark.parametrize("name", ["coll", "epp", "x-epp2", "llama-3", "x-eppx"])
def test_other_names_are_allowed(name):
    assert _cel_allows(name)


def test_two_allowed_backends_never_share_a_child_name():
    """Exhaustive over short names built from the suffixes' own words: no two allowed backends collide."""
    words = ["a", "epp", "activator", "serving", "model", "repo", "launcher"]
    names = ["-".join(p) for n in (1, 2, 3) for p in itertools.product(words, repeat=n)]
    owner: dict[tuple[str, str], str] = {}
    for backend in filter(_cel_allows, names):
        for child in owned_names(BackendRef(backend, "ns", "uid")):
            assert owner.setdefault(child, backend) == backend, (child, owner[child], backend)
