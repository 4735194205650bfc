#!/bin/sh
# Worker of a multi-node vLLM replica: joins the leader's Ray head with this pod's GPUs and blocks.
# If the head goes away, ray exits and the group is recreated as a unit by LeaderWorkerSet.
set -u
: "${LWS_LEADER_ADDRESS:?set by LeaderWorkerSet}" "${GPUS_PER_POD:?}"
port="${RAY_PORT:-6379}"
wait_s="${LAUNCH_WAIT_SECONDS:-600}"
start=$(date +%s)
# The leader's DNS name appears once its pod exists; ray start fails fast without it.
until getent hosts "$LWS_LEADER_ADDRESS" >/dev/null 2>&1; do
  if [ $(( $(date +%s) - start )) -ge "$wait_s" ]; then
    echo "LeaderNotResolvable: $LWS_LEADER_ADDRESS did not resolve in ${wait_s}s" | tee "${TERMINATION_LOG:-/dev/termination-log}"
    exit 1
  fi
  sleep 2
done
# Joining retries until the head listens (bounded); once joined, ray blocks, and its exit (the head
# is gone) ends this container so that LeaderWorkerSet recreates the group as a unit.
while :; do
  echo "[worker ${LWS_WORKER_INDEX:-?}] joining the Ray head at $LWS_LEADER_ADDRESS:$port"
  joined=$(date +%s)
  ray start --address="$LWS_LEADER_ADDRESS:$port" --num-gpus="$GPUS_PER_POD" --block --disable-usage-stats
  rc=$?
  now=$(date +%s)
  if [ $((now - joined)) -ge 60 ]; then
    echo "RayHeadLost: ray exited $rc after $((now - joined))s" | tee "${TERMINATION_LOG:-/dev/termination-log}"
    exit 1
  fi
  if [ $((now - start)) -ge "$wait_s" ]; then
    echo "RayJoinFailed: could not join $LWS_LEADER_ADDRESS:$port in ${wait_s}s" | tee "${TERMINATION_LOG:-/dev/termination-log}"
    exit 1
  fi
  sleep 5
done
