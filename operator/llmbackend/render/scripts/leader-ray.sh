#!/bin/sh
# Leader of a multi-node vLLM replica (one LeaderWorkerSet group): starts the Ray head here, waits,
# bounded, until every pod of the group has joined with its GPUs, then runs "$@" (tritonserver; the
# vLLM model uses distributed_executor_backend "ray" and places its TP x PP workers on the cluster).
# A worker that never joins ends this container with a reason in its termination message.
set -u
say() { echo "[leader $(date -u +%H:%M:%S)] $*"; }
fail() {
  say "FAILED: $*"
  printf '%s\n' "$*" > "${TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null || true
  ray stop --force >/dev/null 2>&1 || true
  exit 1
}
: "${LWS_GROUP_SIZE:?set by LeaderWorkerSet}" "${GPUS_PER_POD:?}" "${WORLD_SIZE:?}"
port="${RAY_PORT:-6379}"
wait_s="${LAUNCH_WAIT_SECONDS:-600}"
[ $((LWS_GROUP_SIZE * GPUS_PER_POD)) -eq "$WORLD_SIZE" ] || fail "plan mismatch: $LWS_GROUP_SIZE pods x $GPUS_PER_POD GPUs != world size $WORLD_SIZE"
say "starting the Ray head on port $port"
ray start --head --port="$port" --num-gpus="$GPUS_PER_POD" --disable-usage-stats || fail "RayHeadFailed: ray start --head failed"
say "waiting up to ${wait_s}s for $LWS_GROUP_SIZE Ray nodes with $WORLD_SIZE GPUs"
start=$(date +%s)
next_log=0
while :; do
  # "<alive nodes> <GPUs>" of the Ray cluster, read through Ray's own client.
  seen=$(python3 -c 'import ray; ray.init(address="auto", logging_level="ERROR"); n=[x for x in ray.nodes() if x["Alive"]]; print(len(n), int(ray.cluster_resources().get("GPU", 0)))' 2>/dev/null) || seen="0 0"
  nodes=${seen% *}; gpus=${seen#* }
  [ "$nodes" -ge "$LWS_GROUP_SIZE" ] && [ "$gpus" -ge "$WORLD_SIZE" ] && break
  now=$(date +%s)
  [ $((now - start)) -ge "$wait_s" ] && fail "WorkersNotReady: after ${wait_s}s the Ray cluster has $nodes/$LWS_GROUP_SIZE nodes, $gpus/$WORLD_SIZE GPUs"
  if [ "$now" -ge "$next_log" ]; then say "Ray cluster: $nodes/$LWS_GROUP_SIZE nodes, $gpus/$WORLD_SIZE GPUs"; next_log=$((now + 10)); fi
  sleep "${LAUNCH_POLL_SECONDS:-2}"
done
say "all $LWS_GROUP_SIZE Ray nodes joined after $(( $(date +%s) - start ))s; starting the server"
"$@" &
pid=$!
trap 'say "stopping: forwarding SIGTERM"; kill -TERM "$pid" 2>/dev/null' TERM INT
while :; do
  wait "$pid"; rc=$?
  kill -0 "$pid" 2>/dev/null || break
done
ray stop --force >/dev/null 2>&1 || true
[ "$rc" -eq 0 ] && exit 0
fail "ServerExited: the server exited $rc (a Ray worker lost ends vLLM's engine); the group restarts"
