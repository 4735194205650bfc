"""Scripts the operator ships in ConfigMaps to run in the stock serving image (package data, stdlib only)."""
