-- Argo CD health check for llmbackend.dev/LLMBackend
-- (resource.customizations.health.llmbackend.dev_LLMBackend in argocd-cm; embedded verbatim in
-- argocd-cm-patch.yaml -- tests/unit/test_argocd_health.py keeps the two equal).
--
--   Progressing  no status yet; status.observedGeneration < metadata.generation; a condition
--                observed for an older generation; Available missing, or False while
--                Progressing=True (a rollout or scale-up in flight)
--   Degraded     Degraded=True or Planned=False (message "Reason: message" of that condition);
--                Available=False with no rollout in progress
--   Suspended    spec.replicas == 0 with autoscaling off (nothing is served, on purpose)
--   Healthy      Available=True for the current generation
--
-- Written for Lua 5.1 (Argo CD runs gopher-lua).
local hs = {}

local function condition(conditions, ctype)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

local function describe(c, fallback)
  if c == nil then
    return fallback
  end
  local reason = c.reason or ""
  local message = c.message or ""
  if reason ~= "" and message ~= "" then
    return reason .. ": " .. message
  elseif reason ~= "" then
    return reason
  elseif message ~= "" then
    return message
  end
  return fallback
end

local generation = 0
if obj.metadata ~= nil and obj.metadata.generation ~= nil then
  generation = obj.metadata.generation
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to reconcile the LLMBackend"
  return hs
end

if status.observedGeneration == nil or status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local conditions = status.conditions
if conditions ~= nil then
  for _, c in ipairs(conditions) do
    if c.observedGeneration ~= nil and c.observedGeneration < generation then
      hs.status = "Progressing"
      hs.message = "Condition " .. tostring(c.type) .. " is from generation " .. tostring(c.observedGeneration)
        .. ", waiting for generation " .. tostring(generation)
      return hs
    end
  end
end

local degraded = condition(conditions, "Degraded")
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(degraded, "Degraded")
  return hs
end

local planned = condition(conditions, "Planned")
if planned ~= nil and planned.status == "False" then
  hs.status = "Degraded"
  hs.message = describe(planned, "No parallelism plan fits the cluster")
  return hs
end

local spec = obj.spec or {}
local autoscaling = spec.autoscaling or {}
if spec.replicas == 0 and autoscaling.enabled ~= true then
  hs.status = "Suspended"
  hs.message = "Scaled to zero replicas (spec.replicas is 0, autoscaling off)"
  return hs
end

local available = condition(conditions, "Available")
local progressing = condition(conditions, "Progressing")
if available ~= nil and available.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(available, "Available")
  return hs
end

if available == nil or (progressing ~= nil and progressing.status == "True") then
  hs.status = "Progressing"
  hs.message = describe(progressing, describe(available, "Waiting for the backend to become available"))
  return hs
end

hs.status = "Degraded"
hs.message = describe(available, "Not available")
return hs
