"""model.source: hf:// and s3:// URIs with credentials, endpoint and cache; pvc as before."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from llmbackend.api.v1alpha1 import ModelSource


@pytest.mark.parametrize("source", [
    {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"},
    {"uri": "hf://Qwen/Qwen3-32B@main", "secretRef": {"name": "hf-token"}},
    {"uri": "hf://openai/gpt-oss-120b@b5c939de8f754692c1647ca79fbf85e8c1e70f8a"},
    {"uri": "s3://models/llama-3.1-8b", "secretRef": {"name": "s3-creds"}, "endpoint": "http://minio.storage:9000", "region": "eu-west-1"},
    {"uri": "s3://models", "cache": {"claimName": "shared-models", "size": "500Gi", "storageClassName": "fast"}},
    {"pvc": {"claimName": "models", "path": "/llama"}},
])
def test_valid_sources(source) -> None:
    assert ModelSource.model_validate(source).dump() == source


@pytest.mark.parametrize("source", [
    {"uri": "gs://bucket/model"},                      # no downloader for it
    {"uri": "hf://just-a-name"},                        # org/name required
    {"uri": "hf://org/name@rev with space"},
    {"uri": "hf://org/name@../../etc"},
    {"uri": "hf://org/name@.."},                        # the probe: a ref "..", the Deployment loaded refs/..
    {"uri": "hf://org/name@."},
    {"uri": "hf://org/name@a..b"},
    {"uri": "hf://org/name@.hidden"},
    {"uri": "hf://org/name@main."},
    {"uri": "hf://org/name@main.lock"},
    {"uri": "hf://org/name."},
    {"uri": "hf://org/a..b"},
    {"uri": "s3://bucket/../etc"},
    {"uri": "s3://bucket//prefix"},                     # no empty segment (the program would strip this one)
    {"uri": "s3://bucket", "endpoint": "ftp://x"},
    {"uri": "s3://bucket", "secretRef": {"name": "Bad_Name"}},
    {"uri": "s3://bucket", "cache": {"size": "lots"}},
])
def test_invalid_sources(source) -> None:
    with pytest.raises(ValidationError):
        ModelSource.model_validate(source)


@pytest.mark.parametrize("uri", [
    "hf://org/name@..", "hf://org/name@.", "hf://org/name@a..b", "hf://org/name@main.lock", "hf://org/name@.x",
    "hf://org/name@v1.0", "hf://org/name@main", "hf://org/name@" + "a" * 40, "hf://org/Llama-3.1-8B", "hf://org/a..b",
    "s3://bucket/a/../b", "s3://bucket/a/b", "s3://bucket",
    # The bucket is a cache directory like org and name; the prefix has no empty or over-long segment.
    "s3://0.", "s3://a..b", "s3://.bucket", "s3://my.bucket", "s3://b/x//y", "s3://b/x/", "s3://b/",
    "s3://b/" + "a" * 255, "s3://b/" + "a" * 256,
])
def test_the_api_and_the_downloader_agree_on_uris(uri) -> None:
    """What the API server admits, the downloader accepts (and the reverse): an object stored before a rule
    existed is refused by the program with InvalidSource instead of writing outside its directory."""
    from llmbackend import model_fetch as mf
    try:
        ModelSource.model_validate({"uri": uri})
        api_ok = True
    except ValidationError:
        api_ok = False
    try:
        mf.parse_uri(uri)
        program_ok = True
    except mf.FetchError:
        program_ok = False
    assert api_ok == program_ok


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["hf://", "s3://"]), st.from_regex(r"\A[A-Za-z0-9._~/@\-]{1,40}\Z"))
def test_every_uri_the_api_admits_the_downloader_accepts(scheme, rest) -> None:
    """Found by the render fuzz test: s3://0. passed the API and made the renderer raise."""
    from llmbackend import model_fetch as mf
    uri = scheme + rest
    try:
        ModelSource.model_validate({"uri": uri})
    except ValidationError:
        return
    mf.parse_uri(uri)
