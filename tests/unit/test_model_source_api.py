"""model.source: hf:// and s3:// URIs with credentials, endpoint and cache; pvc as before."""

from __future__ import annotations

import pytest
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
    {"uri": "s3://bucket/../etc"},
    {"uri": "s3://bucket", "endpoint": "ftp://x"},
    {"uri": "s3://bucket", "secretRef": {"name": "Bad_Name"}},
    {"uri": "s3://bucket", "cache": {"size": "lots"}},
])
def test_invalid_sources(source) -> None:
    with pytest.raises(ValidationError):
        ModelSource.model_validate(source)
