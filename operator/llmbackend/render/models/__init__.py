"""Triton Python models the operator ships in ConfigMaps (package data: read as text, never imported here)."""
