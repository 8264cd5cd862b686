-- Argo CD health of a lorarl.dev LoraRLJob, read from the conditions the operator writes
-- (docs/status.md). Uses only Lua's base library: Argo CD runs argocd-cm health scripts
-- without the standard libraries unless useOpenLibs is set.
local hs = {}

if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the operator"
  return hs
end
if obj.status.observedGeneration ~= obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to observe the latest spec"
  return hs
end

local conditions = {}
for _, condition in ipairs(obj.status.conditions) do
  conditions[condition.type] = condition
end

local function is(name, status)
  return conditions[name] ~= nil and conditions[name].status == status
end

local function says(name)
  local condition = conditions[name]
  if condition.message ~= nil and condition.message ~= "" then
    return condition.reason .. ": " .. condition.message
  end
  return condition.reason
end

if is("Succeeded", "True") and is("AdapterExported", "False") then
  -- the run succeeded but its adapter (spec.export) was not exported: not Healthy
  hs.status = "Degraded"
  hs.message = says("AdapterExported")
elseif is("Succeeded", "True") and is("AdapterExported", "Unknown") then
  -- the run succeeded and its adapter is being exported
  hs.status = "Progressing"
  hs.message = says("AdapterExported")
elseif is("Succeeded", "True") and is("AdapterServed", "False") then
  -- exported, but the SGLang server (spec.serve) did not take it: not Healthy
  hs.status = "Degraded"
  hs.message = says("AdapterServed")
elseif is("Succeeded", "True") and is("AdapterServed", "Unknown") then
  -- exported and being loaded into the server
  hs.status = "Progressing"
  hs.message = says("AdapterServed")
elseif is("Succeeded", "True") then
  hs.status = "Healthy"
  hs.message = says("Succeeded")
elseif is("Failed", "True") then
  hs.status = "Degraded"
  hs.message = says("Failed")
elseif is("Stalled", "True") then
  -- invalid spec, startup timeout, unhealthy training (also when suspended for it)
  hs.status = "Degraded"
  hs.message = says("Stalled")
elseif is("TrainingHealthy", "False") then
  hs.status = "Degraded"
  hs.message = says("TrainingHealthy")
elseif is("Reconciling", "True") then
  -- pending, queued in Kueue, preparing, retrying, suspending or resuming
  hs.status = "Progressing"
  hs.message = says("Reconciling")
elseif is("Suspended", "True") then
  hs.status = "Suspended"
  hs.message = says("Suspended")
elseif is("Ready", "True") then
  -- training: a run is Healthy only once it has succeeded
  hs.status = "Progressing"
  hs.message = says("Ready")
else
  hs.status = "Progressing"
  hs.message = "waiting for the operator"
end
return hs
