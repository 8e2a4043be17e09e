{{/*
Autoscaling and monitoring (entrypoint/render/autoscaling.py and monitoring.py): JSON arrays of
the objects they add. kimi.autoscaling also sets the copies and the rollout of the engine groups
it is given (their maps are shared), as autoscaling.apply does.
*/}}

{{/* kimi.fill: (list text ctx matchers values) -> the data's expression with ${match} and ${<setting>} filled */}}
{{- define "kimi.fill" -}}
{{- $text := index . 0 | replace "${match}" (index . 2) -}}
{{- range $k, $v := index . 3 }}{{ $text = $text | replace (printf "${%s}" $k) (toString $v) }}{{ end -}}
{{- $text -}}
{{- end -}}

{{/* kimi.operate: the operating settings (the chart's values under the settings' names) */}}
{{- define "kimi.operate" -}}
{{- $v := .Values -}}
{{- $a := $v.autoscaling -}}
{{- $replicas := int $v.replicas -}}
{{- /* monitoring.scraper.podLabels as KIMI_SCRAPER_LABELS writes them (key=value), for the hook to judge */ -}}
{{- $scraperLabels := list -}}
{{- range $k, $x := ($v.monitoring.scraper.podLabels | default dict) }}{{ $scraperLabels = append $scraperLabels (printf "%s=%v" $k $x) }}{{ end -}}
{{- toJson (dict "replicas" $replicas "max_replicas" (int $a.maxReplicas)
      "autoscaling" (ternary $a.engine "off" (and $a.enabled true))
      "scale_waiting" (int $a.waitingPerReplica) "scale_kv_percent" (int $a.kvCachePercent)
      "prometheus_url" $a.prometheusUrl "slo_ttft_ms" (int $v.monitoring.sloTtftMs) "slo_itl_ms" (int $v.monitoring.sloItlMs)
      "monitoring" (and $v.monitoring.enabled true) "scraper_namespace" ($v.monitoring.scraper.namespace | default "")
      "scraper_labels" $scraperLabels) -}}
{{- end -}}

{{/* kimi.match: (list ctx facts component) -> PromQL matchers of this deployment's engines */}}
{{- define "kimi.match" -}}
{{- $c := index . 0 -}}{{- $m := (index . 1).monitoring -}}
{{- $out := printf "namespace=%q,%s=%q" $c.namespace (index $m.pod_labels "app.kubernetes.io/name") $c.name -}}
{{- $components := index . 2 | default list -}}
{{- if eq (len $components) 1 }}{{ $out = printf "%s,%s=%q" $out (index $m.pod_labels "app.kubernetes.io/component") (first $components) }}
{{- else if $components }}{{ $out = printf "%s,%s=~%q" $out (index $m.pod_labels "app.kubernetes.io/component") (join "|" $components) }}{{ end -}}
{{- $out -}}
{{- end -}}

{{- define "kimi.autoscaling" -}}
{{- $root := index . 0 -}}{{- $c := index . 1 -}}{{- $objects := index . 2 -}}
{{- $f := $root.Files.Get "files/facts.json" | fromJson -}}
{{- $m := $f.monitoring -}}
{{- $o := include "kimi.operate" $root | fromJson -}}
{{- $lws := $f.defaults.lws -}}
{{- /* the engine groups: Deployments and LeaderWorkerSets of GPU processes (not the router, not a KV store's master) */ -}}
{{- $gpuRoles := list -}}
{{- range $g := $c.groups }}{{ range $g.procs }}{{ if .gpu }}{{ $gpuRoles = append $gpuRoles .role }}{{ end }}{{ end }}{{ end -}}
{{- $engines := list -}}
{{- range $objects }}{{ if and (has .kind (list "Deployment" "LeaderWorkerSet")) (has (index .metadata.labels "app.kubernetes.io/component") $gpuRoles) }}{{ $engines = append $engines . }}{{ end }}{{ end -}}
{{- range $engines }}{{ $_ := set .spec "replicas" (int $o.replicas) }}{{ end -}}
{{- $out := list -}}
{{- if ne $o.autoscaling "off" -}}
  {{- $surge := dict "maxSurge" 1 "maxUnavailable" 0 -}}
  {{- range $objects -}}
    {{- $component := index .metadata.labels "app.kubernetes.io/component" -}}
    {{- if not (or (has $component $gpuRoles) (eq $component "router")) -}}
    {{- else if eq .kind "Deployment" -}}
      {{- $_ := set .spec "strategy" (dict "type" "RollingUpdate" "rollingUpdate" (deepCopy $surge)) -}}
      {{- $_ := set .spec "progressDeadlineSeconds" $c.budget.progressDeadline -}}
      {{- $_ := set .spec.template.spec "topologySpreadConstraints" (list (dict "maxSkew" 1 "topologyKey" "topology.kubernetes.io/zone" "whenUnsatisfiable" "ScheduleAnyway" "labelSelector" (dict "matchLabels" (deepCopy .spec.selector.matchLabels)))) -}}
    {{- else if eq .kind "LeaderWorkerSet" -}}
      {{- $_ := set .spec "rolloutStrategy" (dict "type" "RollingUpdate" "rollingUpdateConfiguration" (deepCopy $surge)) -}}
    {{- end -}}
  {{- end -}}
  {{- /* a copy is never removed sooner than a new one takes to load: serving.yaml's start period */ -}}
  {{- $budget := $m.health.start_period_s -}}
  {{- $behavior := dict "scaleDown" (dict "stabilizationWindowSeconds" $budget "policies" (list (dict "type" "Pods" "value" 1 "periodSeconds" $budget)))
        "scaleUp" (dict "stabilizationWindowSeconds" 0 "policies" (list (dict "type" "Pods" "value" 1 "periodSeconds" 60))) -}}
  {{- $scalers := list -}}{{- $pdbs := list -}}
  {{- range $e := $engines -}}
    {{- $meta := dict "name" $e.metadata.name "namespace" $e.metadata.namespace "labels" (deepCopy $e.metadata.labels) -}}
    {{- $ref := dict "apiVersion" $e.apiVersion "kind" $e.kind "name" $e.metadata.name -}}
    {{- /* the components of the group's pods that serve (and queue): a tp_dp group's every head */ -}}
    {{- $serving := list -}}
    {{- $templates := ternary (list $e.spec.template) (list) (eq $e.kind "Deployment") -}}
    {{- if eq $e.kind "LeaderWorkerSet" }}{{ with $e.spec.leaderWorkerTemplate.leaderTemplate }}{{ $templates = append $templates . }}{{ end }}{{ $templates = append $templates $e.spec.leaderWorkerTemplate.workerTemplate }}{{ end -}}
    {{- range $t := $templates -}}
      {{- $serves := false -}}
      {{- range $t.spec.containers }}{{ range (.ports | default list) }}{{ if eq .name "http" }}{{ $serves = true }}{{ end }}{{ end }}{{ end -}}
      {{- $comp := index $t.metadata.labels "app.kubernetes.io/component" -}}
      {{- if and $serves (not (has $comp $serving)) }}{{ $serving = append $serving $comp }}{{ end -}}
    {{- end -}}
    {{- if eq $o.autoscaling "keda" -}}
      {{- $triggers := list -}}
      {{- range $t := $m.scale_triggers -}}
        {{- $q := include "kimi.fill" (list $t.query $c (include "kimi.match" (list $c $f $serving)) $o) -}}
        {{- $triggers = append $triggers (dict "type" "prometheus" "name" $t.name "metricType" (ternary "AverageValue" "Value" $t.average)
              "metadata" (dict "serverAddress" $o.prometheus_url "query" $q "threshold" (toString (index $o $t.target)))) -}}
      {{- end -}}
      {{- $scalers = append $scalers (dict "apiVersion" "keda.sh/v1alpha1" "kind" "ScaledObject" "metadata" $meta
            "spec" (dict "scaleTargetRef" $ref "minReplicaCount" (int $o.replicas) "maxReplicaCount" (int $o.max_replicas) "pollingInterval" 30
                   "cooldownPeriod" $budget "advanced" (dict "horizontalPodAutoscalerConfig" (dict "behavior" (deepCopy $behavior))) "triggers" $triggers)) -}}
    {{- else -}}
      {{- $metrics := list -}}
      {{- range $t := $m.scale_triggers -}}
        {{- $target := printf "%v%s" (index $o $t.target) $t.suffix -}}
        {{- $metrics = append $metrics (dict "type" "Pods" "pods" (dict "metric" (dict "name" $t.adapter_metric) "target" (dict "type" "AverageValue" "averageValue" $target))) -}}
      {{- end -}}
      {{- $scalers = append $scalers (dict "apiVersion" "autoscaling/v2" "kind" "HorizontalPodAutoscaler" "metadata" $meta
            "spec" (dict "scaleTargetRef" $ref "minReplicas" (int $o.replicas) "maxReplicas" (int $o.max_replicas) "metrics" $metrics "behavior" (deepCopy $behavior))) -}}
    {{- end -}}
    {{- $podLabels := dict $lws.name_label $e.metadata.name -}}
    {{- if eq $e.kind "Deployment" }}{{ $podLabels = deepCopy $e.spec.selector.matchLabels }}{{ end -}}
    {{- $pdbs = append $pdbs (dict "apiVersion" "policy/v1" "kind" "PodDisruptionBudget" "metadata" (deepCopy $meta)
          "spec" (dict "maxUnavailable" 1 "selector" (dict "matchLabels" $podLabels))) -}}
  {{- end -}}
  {{- $out = concat $scalers $pdbs -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- define "kimi.monitoring" -}}
{{- $root := index . 0 -}}{{- $c := index . 1 -}}
{{- $f := $root.Files.Get "files/facts.json" | fromJson -}}
{{- $m := $f.monitoring -}}
{{- $o := include "kimi.operate" $root | fromJson -}}
{{- $out := list -}}
{{- if $root.Values.monitoring.enabled -}}
  {{- $own := merge (dict "app.kubernetes.io/name" $c.name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" "monitoring") $c.helmLabels -}}
  {{- /* monitoring.labels: what the Prometheus selects its PodMonitors and rules by (e.g. release: kube-prometheus-stack) */ -}}
  {{- $selected := merge (deepCopy $own) ($root.Values.monitoring.labels | default dict) -}}
  {{- $components := list -}}
  {{- range $g := $c.groups }}{{ range $g.procs }}{{ if and .serves (ne .role "router") (not (has .role $components)) }}{{ $components = append $components .role }}{{ end }}{{ end }}{{ end -}}
  {{- $relabel := list -}}
  {{- range $label, $target := $m.pod_labels }}{{ $relabel = append $relabel (dict "sourceLabels" (list (index $m.pod_label_sources $label)) "targetLabel" $target) }}{{ end -}}
  {{- $selector := dict "matchLabels" (dict "app.kubernetes.io/name" $c.name "app.kubernetes.io/part-of" "kimi-serve")
        "matchExpressions" (list (dict "key" "app.kubernetes.io/component" "operator" "In" "values" $components)) -}}
  {{- $out = append $out (dict "apiVersion" "monitoring.coreos.com/v1" "kind" "PodMonitor"
        "metadata" (dict "name" (printf "%s-engines" $c.name) "namespace" $c.namespace "labels" (deepCopy $selected))
        "spec" (dict "selector" $selector "podMetricsEndpoints" (list (dict "port" "http" "path" $m.path "interval" ($root.Values.monitoring.interval | default (printf "%ds" (int $m.interval_s))) "relabelings" $relabel)))) -}}
  {{- $match := include "kimi.match" (list $c $f "") -}}
  {{- $rules := list -}}
  {{- range $a := $m.alerts -}}
    {{- $rules = append $rules (dict "alert" $a.name "expr" (include "kimi.fill" (list $a.expr $c $match $o)) "for" (index $a "for")
          "labels" (dict "severity" $a.severity)
          "annotations" (dict "summary" (include "kimi.fill" (list $a.summary $c $match $o)) "description" (include "kimi.fill" (list $a.action $c $match $o)))) -}}
  {{- end -}}
  {{- $out = append $out (dict "apiVersion" "monitoring.coreos.com/v1" "kind" "PrometheusRule"
        "metadata" (dict "name" (printf "%s-alerts" $c.name) "namespace" $c.namespace "labels" (deepCopy $selected))
        "spec" (dict "groups" (list (dict "name" (printf "kimi-serve.%s" $c.name) "rules" $rules)))) -}}
  {{- $out = append $out (dict "apiVersion" "v1" "kind" "ConfigMap"
        "metadata" (dict "name" (printf "%s-dashboard" $c.name) "namespace" $c.namespace "labels" (merge (dict "grafana_dashboard" "1") $own))
        "data" (dict "kimi-serve.json" ($root.Files.Get "files/dashboard.json"))) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
