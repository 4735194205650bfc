"""Programs that run inside the serving pods (shipped in the ConfigMap; standard library only)."""
