"""API types of llmbackend.dev/v1alpha1 (the CRD is generated from these)."""
