#!/bin/sh
# Worker of a multi-node TensorRT-LLM replica: hosts the MPI ranks that the leader starts in this
# container through `kubectl exec` (no sshd); it serves nothing itself.
echo "[worker ${LWS_WORKER_INDEX:-?}] waiting for the leader ${LWS_LEADER_ADDRESS:-?} to start ranks here"
exec sleep infinity
