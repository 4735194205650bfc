#!/bin/sh
# Leader of a multi-node TensorRT-LLM replica (one LeaderWorkerSet group).
#   1. waits, bounded, until every worker pod of its group accepts exec (llmb-exec runs `true` in it: the token
#      may exec into its own workers and read no pod, so a worker that runs is one whose exec succeeds);
#   2. writes the MPI hostfile (pod names, GPUS_PER_POD slots each, the leader first: rank 0 serves);
#   3. runs mpirun with kubexec.sh as the rsh agent (no sshd anywhere): WORLD_SIZE ranks, one per GPU,
#      each running "$@" (trtllm-llmapi-launch tritonserver ...: rank 0 serves, the others work).
# A worker that never comes up, or a rank lost later, ends this container with a reason in its
# termination message; LeaderWorkerSet then recreates the whole group (RecreateGroupOnPodRestart).
set -u
say() { echo "[leader $(date -u +%H:%M:%S)] $*"; }
fail() {
  say "FAILED: $*"
  printf '%s\n' "$*" > "${TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null || true
  exit 1
}
: "${LWS_LEADER_ADDRESS:?set by LeaderWorkerSet}" "${LWS_GROUP_SIZE:?set by LeaderWorkerSet}"
: "${GPUS_PER_POD:?}" "${WORLD_SIZE:?}" "${POD_NAMESPACE:?}" "${HOSTFILE:?}"
LLMB_EXEC="${LLMB_EXEC:-llmb-exec}"
wait_s="${LAUNCH_WAIT_SECONDS:-600}"
leader_pod="${LWS_LEADER_ADDRESS%%.*}"  # <lws>-<group>; workers are <lws>-<group>-<index>
expected=$((LWS_GROUP_SIZE * GPUS_PER_POD))
[ "$expected" -eq "$WORLD_SIZE" ] || fail "plan mismatch: $LWS_GROUP_SIZE pods x $GPUS_PER_POD GPUs != world size $WORLD_SIZE"

workers=""
i=1
while [ "$i" -lt "$LWS_GROUP_SIZE" ]; do workers="$workers $leader_pod-$i"; i=$((i + 1)); done
say "group of $LWS_GROUP_SIZE pods, world size $WORLD_SIZE; waiting up to ${wait_s}s for workers:$workers"

start=$(date +%s)
next_log=0
while :; do
  missing=""
  for pod in $workers; do
    # The channel mpirun will use; its refusal says why (not found, not scheduled, container not running).
    why=$("$LLMB_EXEC" -n "$POD_NAMESPACE" -c "${LAUNCH_CONTAINER:-triton}" "$pod" -- true 2>&1 >/dev/null) \
      || missing="$missing $pod($(printf '%s' "$why" | head -n 1 | sed 's/^llmb-exec: [^:]*: //' | cut -c1-160))"
  done
  [ -z "$missing" ] && break
  now=$(date +%s)
  if [ $((now - start)) -ge "$wait_s" ]; then
    fail "WorkersNotReady: after ${wait_s}s still waiting for$missing"
  fi
  if [ "$now" -ge "$next_log" ]; then say "waiting for$missing"; next_log=$((now + 10)); fi
  sleep "${LAUNCH_POLL_SECONDS:-2}"
done

: > "$HOSTFILE"
echo "$(hostname) slots=$GPUS_PER_POD" >> "$HOSTFILE"
for pod in $workers; do echo "$pod slots=$GPUS_PER_POD" >> "$HOSTFILE"; done
say "all $LWS_GROUP_SIZE pods up after $(( $(date +%s) - start ))s; starting $WORLD_SIZE ranks"

# No tree spawn: only this pod holds the exec credentials, so it starts every remote daemon itself.
mpirun --hostfile "$HOSTFILE" -np "$WORLD_SIZE" --map-by slot --bind-to none \
  --mca plm_rsh_agent "${KUBEXEC:-kubexec.sh}" --mca plm_rsh_no_tree_spawn 1 "$@" &
pid=$!
trap 'say "stopping: forwarding SIGTERM to mpirun"; kill -TERM "$pid" 2>/dev/null' TERM INT
while :; do
  wait "$pid"; rc=$?
  kill -0 "$pid" 2>/dev/null || break  # wait returned because of the trap: keep waiting
done
[ "$rc" -eq 0 ] && { say "mpirun exited 0"; exit 0; }
fail "RankLost: mpirun exited $rc: a rank of the $WORLD_SIZE-rank group ended (see this log); the group restarts"
