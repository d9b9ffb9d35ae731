{{/*
Memory of a pod, and the publish bytes its workers may hold, agreeing with each other (docs/operations.md "Memory per
pod"). A pod needs, in MiB:

  supervisorMi (with more than one worker) + workers x workerMi + inflightFactor x in-flight publish MiB
  + headroomMi

(a JSON publish in progress costs about 4.5 times its body at the peak: the body, its parsed values, the
encoded messages and the frames; measured, docs/operations.md "Install with Helm", resources.limits.memory). The in-flight publish
bytes (limits.max_inflight_publish_bytes, split over the workers) are config's
TUBEMQ_GATEWAY_LIMITS__MAX_INFLIGHT_PUBLISH_BYTES when given; else, without resources.limits.memory,
workers x memory.inflightPublishPerWorkerMi, and the limit follows; with resources.limits.memory, what the
limit leaves. Each worker's share must hold one publish of limits.max_request_bytes, or that publish could
never be taken: a limit that cannot fit the workers fails the render.
*/}}

{{/* MiB of a Kubernetes memory quantity (bytes, or with Ki Mi Gi Ti / k M G T), rounded down. */}}
{{- define "tubemq-gateway.mebibytes" -}}
{{- $q := toString . -}}
{{- $parts := regexFindAll "^([0-9]+(?:\\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$" $q 1 -}}
{{- if not $parts -}}
{{- fail (printf "resources.limits.memory %q is not a memory quantity the chart can read: give it like 768Mi or 2Gi" $q) -}}
{{- end -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $number $q -}}
{{- $scale := get (dict "" 1.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0) $unit -}}
{{- floor (divf (mulf (float64 $number) $scale) 1048576.0) | int -}}
{{- end }}

{{/* The memory plan as YAML: {} when the worker count is not known (no CPU in resources, workers 0) and
there is no memory limit, else workers, limitMi (the pod's limit), inflightBytes (the replica's in-flight
publish cap) and setInflight (whether the chart sets it: config does not). */}}
{{- define "tubemq-gateway.memoryPlan" -}}
{{- $workers := include "tubemq-gateway.workers" . | int -}}
{{- $m := .Values.memory -}}
{{- $limit := "" -}}
{{- with .Values.resources }}{{ $limit = toString (dig "limits" "memory" "" .) }}{{ end -}}
{{- $mib := 1048576 -}}
{{- $config := .Values.config | default dict -}}
{{- $requestMi := div (add (int64 (get $config "TUBEMQ_GATEWAY_LIMITS__MAX_REQUEST_BYTES" | default 22020096)) (sub $mib 1)) $mib -}}
{{- $given := get $config "TUBEMQ_GATEWAY_LIMITS__MAX_INFLIGHT_PUBLISH_BYTES" | toString -}}
{{- if eq $workers 0 -}}
{{- if $limit -}}
{{- fail "resources.limits.memory needs a known worker count to be checked: set workers, or resources.limits.cpu (one worker per CPU); without either the gateway starts one worker per CPU of the node" -}}
{{- end -}}
{{- toYaml dict -}}
{{- else -}}
{{- if and $given (eq (int64 $given) 0) -}}
{{- fail "config.TUBEMQ_GATEWAY_LIMITS__MAX_INFLIGHT_PUBLISH_BYTES 0 (no cap) cannot fit a memory limit: give a cap, or leave it out and let the chart size it" -}}
{{- end -}}
{{- $factor := int $m.inflightFactor -}}
{{- $fixed := add (ternary (int $m.supervisorMi) 0 (gt $workers 1)) (mul $workers (int $m.workerMi)) (int $m.headroomMi) -}}
{{- $leastInflight := mul $workers $requestMi -}}
{{- $inflightMi := 0 -}}
{{- if $given }}{{ $inflightMi = div (add (int64 $given) (sub $mib 1)) $mib }}{{ end -}}
{{- $limitMi := 0 -}}
{{- if $limit -}}
{{- $limitMi = include "tubemq-gateway.mebibytes" $limit | int -}}
{{- if not $given }}{{ $inflightMi = div (sub $limitMi $fixed) $factor }}{{ end -}}
{{- $need := add $fixed (mul $factor (max $inflightMi $leastInflight)) -}}
{{- if lt $limitMi $need -}}
{{- fail (printf "resources.limits.memory %s (%d MiB) cannot hold %d worker(s): it needs at least %dMi = %d (supervisor) + %d x %d (per worker) + %d x %d (publish bytes in flight, at least one %d MiB publish per worker) + %d (headroom). Raise the limit, lower workers / resources.limits.cpu, or leave resources.limits.memory out and the chart sizes it" $limit $limitMi $workers $need (ternary (int $m.supervisorMi) 0 (gt $workers 1)) $workers (int $m.workerMi) $factor (max $inflightMi $leastInflight) $requestMi (int $m.headroomMi)) -}}
{{- end -}}
{{- else -}}
{{- if not $given }}{{ $inflightMi = mul $workers (int $m.inflightPublishPerWorkerMi) }}{{ end -}}
{{- if lt $inflightMi $leastInflight -}}
{{- fail (printf "%d MiB of publish bytes in flight cannot take one %d MiB publish on each of %d worker(s): give at least %d MiB (memory.inflightPublishPerWorkerMi, or config.TUBEMQ_GATEWAY_LIMITS__MAX_INFLIGHT_PUBLISH_BYTES)" $inflightMi $requestMi $workers $leastInflight) -}}
{{- end -}}
{{- $limitMi = add $fixed (mul $factor $inflightMi) -}}
{{- end -}}
{{- $inflight := mul $inflightMi $mib -}}
{{- if $given }}{{ $inflight = int64 $given }}{{ end -}}
{{- toYaml (dict "workers" $workers "limitMi" $limitMi "inflightBytes" $inflight "setInflight" (not $given) "sized" (not $limit)) -}}
{{- end -}}
{{- end }}

{{/* The gateway container's resources: .Values.resources, with the memory limit of the plan when the chart
sizes it, and a memory request equal to the limit unless one is given (the pod is not evicted for memory
it was sized for). */}}
{{- define "tubemq-gateway.resources" -}}
{{- $resources := deepCopy (.Values.resources | default dict) -}}
{{- $plan := include "tubemq-gateway.memoryPlan" . | fromYaml -}}
{{- if $plan -}}
{{- $limits := get $resources "limits" | default dict -}}
{{- $requests := get $resources "requests" | default dict -}}
{{- if $plan.sized }}{{ $_ := set $limits "memory" (printf "%dMi" (int $plan.limitMi)) }}{{ end -}}
{{- if not (get $requests "memory") }}{{ $_ := set $requests "memory" (get $limits "memory") }}{{ end -}}
{{- $_ := set $resources "limits" $limits -}}
{{- $_ := set $resources "requests" $requests -}}
{{- end -}}
{{- toYaml $resources -}}
{{- end }}
