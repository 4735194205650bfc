//go:build tools

// Package tools pins the LeaderWorkerSet controller manager that devcluster/lws.py builds.
package tools

import (
	_ "sigs.k8s.io/lws/cmd"
)
