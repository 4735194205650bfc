-- Argo CD health check for llmbackend.dev/LLMBackend (argo-cd resource_customizations layout; embedded in
-- ../../argocd-cm-patch.yaml, which tests keep equal to this file). Lua 5.1: Argo CD runs gopher-lua.
--
-- The operator writes four conditions on every pass, each with the generation it was computed for:
-- Planned, Available, Progressing, Degraded. A condition counts only for the current generation.
--
-- The rule (operator/llmbackend/api/conditions.py; controller/conditions.py summarize() reads status the same
-- way): waiting on work in flight is Progressing; a failure that needs a person is Degraded.
--
--   Progressing  being deleted; no status yet; the operator has not observed the current generation
--                (and reported no failure for it); work in flight (Progressing=True), also while Planned=False
--                waits for it (a checkpoint being downloaded or inspected) as long as Degraded=False
--   Degraded     Degraded=True for the current generation (wins over anything still in flight); Planned=False
--                with nothing in flight; Available=False with nothing in progress
--   Healthy      Available=True, nothing in progress. Zero replicas on purpose is Healthy, as a Deployment
--                at 0 is in Argo CD: ScaledToZero (autoscaling idle) or ZeroReplicas (spec.replicas 0), with
--                a message saying nothing is served. Not Suspended: a sync wave waits on Suspended forever.
local hs = {}

local function find(conditions, ctype)
  for _, c in ipairs(conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

-- "Reason: message", or whichever of the two is set.
local function describe(c)
  local reason = c.reason or ""
  local message = c.message or ""
  if reason ~= "" and message ~= "" then
    return reason .. ": " .. message
  end
  if reason ~= "" then
    return reason
  end
  return message
end

local function set(state, message)
  hs.status = state
  hs.message = message
  return hs
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  -- as Argo CD itself reports any resource being deleted
  return set("Progressing", "Pending deletion")
end

local generation = 0
if obj.metadata ~= nil and obj.metadata.generation ~= nil then
  generation = obj.metadata.generation
end
if obj.status == nil then
  return set("Progressing", "Waiting for the operator to reconcile the LLMBackend")
end
local observed = obj.status.observedGeneration
local conditions = obj.status.conditions or {}

-- A condition without observedGeneration was computed for status.observedGeneration.
local function current(c)
  local at = c.observedGeneration
  if at == nil then
    at = observed
  end
  return at ~= nil and at >= generation
end

local planned = find(conditions, "Planned")
local available = find(conditions, "Available")
local progressing = find(conditions, "Progressing")
local degraded = find(conditions, "Degraded")

-- A failure reported for the current generation wins: the spec cannot be served until someone changes it.
if degraded ~= nil and degraded.status == "True" and current(degraded) then
  return set("Degraded", describe(degraded))
end
if planned ~= nil and planned.status == "False" and current(planned) then
  -- Not planned yet because the operator's own work is in flight (a download, an inspection): Progressing.
  if progressing ~= nil and progressing.status == "True" and current(progressing)
      and degraded ~= nil and degraded.status == "False" and current(degraded) then
    return set("Progressing", describe(progressing))
  end
  return set("Degraded", describe(planned))
end

if observed == nil or observed < generation then
  return set("Progressing", "Waiting for the operator to observe generation " .. tostring(generation))
end
-- Only the four types above count: a type an operator version no longer writes must not hold the app back.
for _, ctype in ipairs({"Planned", "Available", "Progressing", "Degraded"}) do
  local c = find(conditions, ctype)
  if c ~= nil and not current(c) then
    return set("Progressing", "Waiting for condition " .. ctype .. " of generation " .. tostring(generation))
  end
end
if available == nil then
  return set("Progressing", "Waiting for the operator to report availability")
end

if progressing ~= nil and progressing.status == "True" then
  return set("Progressing", describe(progressing))
end
if available.status == "True" then
  return set("Healthy", describe(available))
end
return set("Degraded", describe(available))
