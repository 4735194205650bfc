#!/bin/sh
# MPI's rsh agent without sshd: mpirun (on the leader) calls `kubexec.sh HOST COMMAND...` to start its
# daemon on a worker; HOST is the worker's pod name (the leader writes pod names into the hostfile),
# and the command runs in that pod's serving container through the pod's exec subresource (llmb-exec:
# `kubectl exec` without reading the pod first, so the leader's token cannot read pods). The leader's
# ServiceAccount may exec only into its own workers (manifests/default/launcher-admission.yaml).
set -eu
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;  # rsh-style options (none by default); the first other word is the host
    *) break ;;
  esac
done
host="$1"; shift
pod="${host%%.*}"
exec "${LLMB_EXEC:-llmb-exec}" -n "$POD_NAMESPACE" -c "${LAUNCH_CONTAINER:-triton}" "$pod" -- /bin/sh -c "$*"
