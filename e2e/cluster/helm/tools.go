//go:build tools

// Package tools pins the Helm CLI that devcluster/helm.py builds (the chart's lint/template/install tests).
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
