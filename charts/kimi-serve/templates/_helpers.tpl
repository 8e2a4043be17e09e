{{/*
The chart's objects are the objects `kimi-serve plan --format k8s` renders for the same settings
(tests/chart compares them). Facts come from files/facts.json, generated from recipes/ and the
renderers by `python build.py chart` (a test fails when it is stale); the logic below mirrors
entrypoint/render/k8s.py, k8s_pod.py, autoscaling.py and monitoring.py. Every helper returns JSON.
*/}}

{{/* kimi.env: the value of a setting as a container environment variable (render/deployment.py _env_value) */}}
{{- define "kimi.envValue" -}}
{{- if kindIs "bool" . -}}{{ ternary "1" "0" . }}
{{- else if kindIs "slice" . -}}{{ join "," . }}
{{- else if kindIs "float64" . -}}{{ int64 . }}
{{- else -}}{{ . }}
{{- end -}}
{{- end -}}

{{/* kimi.ctx: the deployment the settings describe: names, shape, groups of processes, env */}}
{{- define "kimi.ctx" -}}
{{- $f := .Files.Get "files/facts.json" | fromJson -}}
{{- $d := $f.defaults -}}
{{- $s := dict -}}
{{- range $k, $v := (.Values.settings | default dict) }}{{ if not (kindIs "invalid" $v) }}{{ $_ := set $s $k $v }}{{ end }}{{ end -}}
{{- $hw := required "settings.hardware is required: a hardware id of recipes/hardware.yaml" $s.hardware -}}
{{- if $s.preload }}{{ fail "settings.preload: the chart does not draw the weight cache sidecar (vllm preload) yet; render it with KIMI_PRELOAD=1 kimi-serve plan --format k8s (docs/day2.md), or unset settings.preload" }}{{ end -}}
{{- if not (hasKey $f.hardware $hw) }}{{ fail (printf "settings.hardware=%s is not a hardware id the chart knows" $hw) }}{{ end -}}
{{- $hwf := index $f.hardware $hw -}}
{{- $slug := $s.recipe | default $f.default_recipe -}}
{{- $r := index $f.recipes $slug -}}
{{- if not (hasKey $r.hardware $hw) }}{{ fail (printf "the %s recipe does not run on %s (it runs on %s)" $r.title $hw (join ", " (keys $r.hardware | sortAlpha))) }}{{ end -}}
{{- $rhw := index $r.hardware $hw -}}
{{- $nodes := int (hasKey $s "nodes" | ternary $s.nodes 1) -}}
{{- $sid := $s.strategy | default (ternary $r.default_strategy.multi $r.default_strategy.single (gt $nodes 1)) -}}
{{- if not (has $sid $rhw.strategies) }}{{ fail (printf "settings.strategy=%s is not one the %s recipe offers on %s (it offers %s)" $sid $r.title $hw (join ", " $rhw.strategies)) }}{{ end -}}
{{- $st := index $r.strategies $sid -}}
{{- $floor := int (index $rhw.min_gpus $sid | default 0) -}}
{{- $gpus := mul (int (index $hwf.resources (first (without (keys $hwf.resources | sortAlpha) "cpu" "memory")))) (ternary $nodes 1 (eq $st.shape "multi_node")) -}}
{{- if and (ne $st.shape "pd_cluster") (lt $gpus $floor) }}{{ fail (printf "settings.strategy=%s on %d x %s GPUs: the %s recipe runs it on at least %d GPUs (strategy_min_gpus): add nodes" $sid $gpus $hw $r.title $floor) }}{{ end -}}
{{- $vid := $s.variant | default "default" -}}
{{- /* KV offload (docs/kv-cache.md, core/kv.py): a Mooncake KV store's processes, or an option beside each engine */ -}}
{{- $kid := trim (toString ($s.kv_offload | default "")) -}}
{{- $kvs := dict -}}{{- $kvo := dict -}}
{{- if $kid -}}
  {{- if hasKey $f.kv.stores $kid }}{{ $kvs = index $f.kv.stores $kid }}
  {{- else if hasKey $f.kv.options $kid }}{{ $kvo = index $f.kv.options $kid }}
  {{- else }}{{ fail (printf "settings.kv_offload=%s is not a KV choice; the choices: %s. Unset it for no KV offload." $kid (join ", " (concat (keys $f.kv.options | sortAlpha) (keys $f.kv.stores | sortAlpha)))) }}{{ end -}}
  {{- range (index ($rhw.kv_refused | default dict) $kid | default list) }}{{ if has $sid (index . 1) }}{{ fail (index $f.kv.messages (int (index . 0))) }}{{ end }}{{ end -}}
  {{- $floor := (ternary $kvs $kvo (not (empty $kvs))).min_vllm_version -}}
  {{- if and $floor $s.vllm_version (regexMatch "^[0-9]+\\.[0-9]+(\\.[0-9]+)?$" (toString $s.vllm_version)) -}}
    {{- if semverCompare (printf "<%s" $floor) (toString $s.vllm_version) }}{{ fail (printf "settings.kv_offload=%s needs vLLM >= %s, but settings.vllm_version=%s: run an image built on a newer vLLM (the default tags)" $kid $floor (toString $s.vllm_version)) }}{{ end -}}
  {{- end -}}
  {{- if regexMatch "(^|\\s)--kv-transfer-config(\\s|=|$)" ($s.extra_args | default "") }}{{ fail (printf "settings.kv_offload=%s sets --kv-transfer-config, and settings.extra_args sets it too: keep one" $kid) }}{{ end -}}
  {{- if and $kvs (eq $st.shape "pd_cluster") (hasKey $s "kv_instances") }}{{ fail "settings.kv_instances does not apply to settings.strategy=pd_cluster: its pools size the deployment (settings.prefill_nodes, settings.decode_nodes). Remove it." }}{{ end -}}
{{- end -}}
{{- range list "kv_instances" "instance_addrs" "mooncake_master_addr" -}}
  {{- if and (hasKey $s .) (empty $kvs) }}{{ fail (printf "settings.%s configures a KV store, but settings.kv_offload is %s: remove it, or set settings.kv_offload to a kv_store_* deployment (docs/kv-cache.md)" . (ternary (printf "%s (it runs beside each engine)" $kid) "not set" (ne $kid ""))) }}{{ end -}}
{{- end -}}
{{- if regexMatch "(^|\\s)--port(\\s|=|$)" ($s.extra_args | default "") }}{{ fail "settings.extra_args sets --port: give the API port as settings.port (the chart draws ports, probes and Services from it)" }}{{ end -}}
{{- $name := $s.name | default $r.deployment_name -}}
{{- /* settings.namespace; else the release's (helm install -n N); else the settings' default, as plan */ -}}
{{- $ns := $s.namespace | default (ternary "" .Release.Namespace (eq .Release.Namespace "default")) -}}
{{- range $f.settings }}{{ if and (eq .name "namespace") (not $ns) }}{{ $ns = .default }}{{ end }}{{ end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $ns) }}{{ fail (printf "settings.namespace=%q is not a Kubernetes namespace name" $ns) }}{{ end -}}
{{- $cacheDir := "" -}}
{{- range $f.settings }}{{ if eq .name "cache_dir" }}{{ $cacheDir = $s.cache_dir | default .default }}{{ end }}{{ end -}}
{{- $routerPort := 0 -}}
{{- range $f.settings }}{{ if eq .name "router_port" }}{{ $routerPort = int ($s.router_port | default .default) }}{{ end }}{{ end -}}
{{- $port := int ($s.port | default $d.port) -}}
{{- $image := $s.image | default $hwf.image -}}
{{- /* issue 30: settings.image_digest pins it (render/deployment.image) */ -}}
{{- with $s.image_digest -}}
  {{- $named := first (splitList "@" $image) -}}
  {{- if and (contains "@" $image) (ne (last (splitList "@" $image)) .) }}{{ fail (printf "settings.image=%s names another digest than settings.image_digest=%s: keep one of them" $image .) }}{{ end -}}
  {{- $image = printf "%s@%s" $named . -}}
{{- end -}}
{{- /* the settings every container gets: the user's, the pinned choices, the addresses the deployment gives its pods */ -}}
{{- $pinned := dict "hardware" $hw "strategy" $sid -}}
{{- $eff := deepCopy $s -}}
{{- $groups := list -}}
{{- $lws := $f.defaults.lws -}}
{{- $selector := dict -}}
{{- $apiPort := $port -}}
{{- /* a KV store's master (Deployment + Service) and store (StatefulSet of one + headless Service), the
      addresses the deployment gives them (k8s_kv.deployment_environ; as in plan, they take the place
      of the settings' own) */ -}}
{{- $kvFront := list -}}
{{- if $kvs -}}
  {{- $_ := set $eff "mooncake_master_addr" (printf "%s-master" $name) -}}
  {{- $_ := set $eff "mooncake_store_host" (printf "%s-store-0.%s-store" $name $name) -}}
  {{- $roles := $kvs.roles -}}
  {{- $kvFront = list (dict "kind" "Deployment" "name" (printf "%s-master" $name) "component" "master" "claim" "" "tcpService" true
        "procs" (list (dict "role" "master" "serves" false "helper" true "port" (int $roles.master.port) "gpu" false "resources" $roles.master.resources))) -}}
  {{- if $kvs.store -}}
    {{- $kvFront = append $kvFront (dict "kind" "StatefulSet" "name" (printf "%s-store" $name) "component" "store" "replicas" 1 "claims" false
          "procs" (list (dict "role" "store" "serves" false "helper" true "port" (int $roles.store.port) "gpu" false "rank" true "resources" $roles.store.resources))) -}}
  {{- end -}}
{{- end -}}
{{- if and (eq $st.shape "single") $kvs -}}
  {{- /* render/k8s_kv.py: master (Deployment + Service), store (StatefulSet of one + headless Service),
        instances (StatefulSet, each pod its claim, rank = pod index), the cache-aware router when N > 1 */ -}}
  {{- $inst := int ($s.kv_instances | default $kvs.default_instances) -}}
  {{- $_ := set $pinned "kv_instances" $inst -}}
  {{- /* the addresses the deployment gives its own pods (k8s_kv.deployment_environ); as in plan, they
        take the place of the settings' (the KIMI_CONFIG file's) addresses */ -}}
  {{- $hosts := list -}}
  {{- range $i := until $inst }}{{ $hosts = append $hosts (printf "%s-instance-%d.%s-instance" $name $i $name) }}{{ end -}}
  {{- $_ := set $eff "instance_addrs" (join "," $hosts) -}}
  {{- $groups = $kvFront -}}
  {{- $groups = append $groups (dict "kind" "StatefulSet" "name" (printf "%s-instance" $name) "component" "instance" "replicas" $inst "claims" true
        "procs" (list (dict "role" "instance" "serves" true "port" $port "gpu" true "rank" true))) -}}
  {{- if gt $inst 1 -}}
    {{- $rport := int ($s.router_port | default $kvs.roles.router.port) -}}
    {{- $groups = append $groups (dict "kind" "Deployment" "name" (printf "%s-router" $name) "component" "router" "claim" ""
          "procs" (list (dict "role" "router" "serves" true "port" $rport "gpu" false "resources" $kvs.roles.router.resources))) -}}
    {{- $selector = dict "app.kubernetes.io/name" $name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" "router" -}}
    {{- $apiPort = $rport -}}
  {{- else -}}
    {{- $selector = dict "app.kubernetes.io/name" $name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" "instance" -}}
  {{- end -}}
{{- else if eq $st.shape "single" -}}
  {{- $groups = list (dict "kind" "Deployment" "name" $name "component" "single" "claim" (printf "%s-cache" $name)
        "procs" (list (dict "role" "single" "serves" true "port" $port "gpu" true))) -}}
  {{- $selector = dict "app.kubernetes.io/name" $name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" "single" -}}
{{- else if eq $st.shape "multi_node" -}}
  {{- if lt $nodes 2 }}{{ fail (printf "settings.strategy=%s spans nodes: set settings.nodes to 2 or more" $sid) }}{{ end -}}
  {{- $_ := set $pinned "nodes" $nodes -}}
  {{- $_ := set $eff "iface" $d.auto_iface.KIMI_IFACE -}}
  {{- $procs := list (dict "role" "head" "serves" true "port" $port "gpu" true) -}}
  {{- range $i := untilStep 1 $nodes 1 }}{{ $procs = append $procs (dict "role" "worker" "serves" $st.worker_serves_http "port" $port "gpu" true) }}{{ end -}}
  {{- $groups = list (dict "kind" "LeaderWorkerSet" "name" $name "component" "head" "procs" $procs) -}}
  {{- $selector = dict $lws.name_label $name -}}
  {{- if not $st.worker_serves_http }}{{ $_ := set $selector $lws.index_label "0" }}{{ end -}}
{{- else -}}
  {{- $addrs := dict -}}
  {{- $groups = $kvFront -}}
  {{- range $role := list "prefill" "decode" -}}
    {{- $key := printf "%s_nodes" $role -}}
    {{- $pools := index ($rhw.pd_pools | default dict) $vid -}}
    {{- if not $pools }}{{ fail (printf "a PD cluster of the %s recipe with settings.variant=%s on %s: kimi-serve plan says why it cannot" $r.title $vid $hw) }}{{ end -}}
    {{- $n := int (hasKey $s $key | ternary (index $s $key) (index $pools $role).nodes) -}}
    {{- if eq $n 0 }}{{ fail "A pool of 0 nodes shares one node's GPUs with the other pool, which Kubernetes cannot give to two pods. Set settings.prefill_nodes and settings.decode_nodes to 1 or more, or render the shared node for Compose: kimi-serve plan --format compose." }}{{ end -}}
    {{- $_ := set $pinned $key $n -}}
    {{- $par := index $s (printf "%s_parallelism" $role) | default (index $pools $role).parallelism -}}
    {{- if not (hasKey (index $r.pd.worker_serves_http $role) $par) }}{{ fail (printf "settings.%s_parallelism=%s is not offered by the %s recipe's strategies" $role $par $r.title) }}{{ end -}}
    {{- if and (gt $n 1) (kindIs "invalid" (index (index $r.pd.worker_serves_http $role) $par)) }}{{ fail (printf "the %s recipe runs no %s pool of %d nodes with %s parallelism: kimi-serve plan says why" $r.title $role $n $par) }}{{ end -}}
    {{- $lname := printf "%s-%s" $name $role -}}
    {{- $hosts := list (printf "%s-0.%s" $lname $lname) -}}
    {{- range $i := untilStep 1 $n 1 }}{{ $hosts = append $hosts (printf "%s-0-%d.%s" $lname $i $lname) }}{{ end -}}
    {{- $_ := set $addrs (printf "%s_addrs" $role) (join "," $hosts) -}}
    {{- $rport := int (index $r.pd.ports $role) -}}
    {{- $procs := list (dict "role" $role "serves" true "port" $rport "gpu" true) -}}
    {{- range $i := untilStep 1 $n 1 }}{{ $procs = append $procs (dict "role" $role "serves" (index (index $r.pd.worker_serves_http $role) $par) "port" $rport "gpu" true) }}{{ end -}}
    {{- $groups = append $groups (dict "kind" "LeaderWorkerSet" "name" $lname "component" $role "procs" $procs) -}}
  {{- end -}}
  {{- range $k, $v := $addrs }}{{ $_ := set $eff $k $v }}{{ end -}}
  {{- $_ := set $eff "iface" $d.auto_iface.KIMI_IFACE -}}
  {{- $groups = append $groups (dict "kind" "Deployment" "name" (printf "%s-router" $name) "component" "router" "claim" ""
        "procs" (list (dict "role" "router" "serves" true "port" $routerPort "gpu" false))) -}}
  {{- $selector = dict "app.kubernetes.io/name" $name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" "router" -}}
  {{- $apiPort = $routerPort -}}
{{- end -}}
{{- /* the variant runs on this hardware and fits each pool's GPUs (the resolver's memory check) */ -}}
{{- if not (hasKey $r.variants $vid) }}{{ fail (printf "settings.variant=%s is not a variant of the %s recipe (it has %s)" $vid $r.title (join ", " (keys $r.variants | sortAlpha))) }}{{ end -}}
{{- with index $rhw.unsupported_variants $vid }}{{ fail . }}{{ end -}}
{{- if not $s.skip_memory_check -}}
  {{- $need := float64 (index $r.variants $vid) -}}
  {{- range $g := $groups -}}
    {{- if (first $g.procs).gpu -}}
      {{- $have := mulf (len $g.procs) $hwf.vram_gb -}}
      {{- if lt $have $need }}{{ fail (printf "settings.variant=%s needs at least %.0f GB of GPU memory, but %s's %d x %s nodes hold %.0f GB: add nodes (settings.nodes, or the pool's settings.<pool>_nodes), choose another variant, or settings.skip_memory_check=true to try anyway" $vid $need $g.name (len $g.procs) $hw $have) }}{{ end -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- $env := list -}}
{{- range $f.settings -}}
  {{- if .passed -}}
    {{- if hasKey $pinned .name -}}{{ $env = append $env (dict "name" .env "value" (include "kimi.envValue" (index $pinned .name))) }}
    {{- else if hasKey $eff .name -}}{{ $env = append $env (dict "name" .env "value" (include "kimi.envValue" (index $eff .name))) }}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- /* issue 30, the stop sequence (render/deployment.stop): the drain every engine gets as --shutdown-timeout */ -}}
{{- $drain := 0 -}}
{{- range $f.settings }}{{ if eq .name "drain_timeout" }}{{ $drain = int (hasKey $s "drain_timeout" | ternary $s.drain_timeout .default) }}{{ end }}{{ end -}}
{{- $out := dict "drain" $drain "name" $name "namespace" $ns "image" $image "hardware" $hw "strategy" $sid "shape" $st.shape
      "groups" $groups "selector" $selector "apiPort" $apiPort "env" $env "cacheDir" $cacheDir
      "pd" (eq $st.shape "pd_cluster") "roles" (or (eq $st.shape "pd_cluster") (not (empty $kvs)))
      "companion" (ternary (dict) ($kvo.companion | default dict) (empty $kvo)) -}}
{{- toJson $out -}}
{{- end -}}

{{/* kimi.meta: (list ctx name component [annotations]) -> metadata */}}
{{- define "kimi.meta" -}}
{{- $c := index . 0 -}}
{{- $m := dict "name" (index . 1) "namespace" $c.namespace "labels" (dict "app.kubernetes.io/name" $c.name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" (index . 2)) -}}
{{- if and (gt (len .) 3) (index . 3) }}{{ $_ := set $m "annotations" (index . 3) }}{{ end -}}
{{- toJson $m -}}
{{- end -}}

{{/* kimi.skips: (list root ctx proc) -> checkov skip annotations (k8s_pod.skip_annotations) */}}
{{- define "kimi.skips" -}}
{{- $f := (index . 0).Files.Get "files/facts.json" | fromJson -}}
{{- $c := index . 1 -}}{{- $p := index . 2 -}}
{{- $skips := dict -}}
{{- if and (not $p.serves) (not $p.helper) }}{{ $_ := set $skips "CKV_K8S_8" $f.defaults.skips.headless }}{{ $_ := set $skips "CKV_K8S_9" $f.defaults.skips.headless }}{{ end -}}
{{- if not (contains "@sha256:" $c.image) }}{{ $_ := set $skips "CKV_K8S_43" $f.defaults.skips.tag }}{{ end -}}
{{- $out := dict -}}
{{- range $i, $check := keys $skips | sortAlpha }}{{ $_ := set $out (printf "checkov.io/skip%d" (add1 $i)) (printf "%s=%s" $check (index $skips $check)) }}{{ end -}}
{{- toJson $out -}}
{{- end -}}

{{/* kimi.pod: (list root ctx proc claim) -> {metadata, spec} of the pod template (k8s_pod.pod_spec) */}}
{{- define "kimi.pod" -}}
{{- $root := index . 0 -}}{{- $c := index . 1 -}}{{- $p := index . 2 -}}{{- $claim := index . 3 -}}
{{- $f := $root.Files.Get "files/facts.json" | fromJson -}}
{{- $d := $f.defaults -}}
{{- $v := $root.Values -}}
{{- $hwf := index $f.hardware $c.hardware -}}
{{- $env := $c.env -}}
{{- $settingsEnv := $env -}}
{{- if $c.roles }}{{ $env = append $env (dict "name" "KIMI_ROLE" "value" $p.role) }}{{ end -}}
{{- /* a StatefulSet pod's rank is its ordinal (k8s_kv._with_rank) */ -}}
{{- if $p.rank }}{{ $env = prepend $env (dict "name" "KIMI_NODE_RANK" "valueFrom" (dict "fieldRef" (dict "fieldPath" $f.kv.pod_index))) }}{{ end -}}
{{- $env = append $env (dict "name" $d.token.path_env "value" (printf "%s/%s" $d.token.dir $d.token.file)) -}}
{{- range ($v.extraEnv | default list) }}{{ $env = append $env (dict "name" .name "value" .value) }}{{ end -}}
{{- $amounts := deepCopy ($p.resources | default (ternary $hwf.resources $f.router.resources $p.gpu)) -}}
{{- $resources := dict "limits" $amounts "requests" (deepCopy $amounts) -}}
{{- $mounts := list -}}{{- $volumes := list -}}
{{- range $d.scratch }}{{ $mounts = append $mounts (dict "name" (index . 0) "mountPath" (index . 1)) }}{{ $volumes = append $volumes (dict "name" (index . 0) "emptyDir" dict) }}{{ end -}}
{{- $mounts = append $mounts (dict "name" $d.volumes.token "mountPath" $d.token.dir "readOnly" true) -}}
{{- $volumes = append $volumes (dict "name" $d.volumes.token "secret" (dict "secretName" (printf "%s-hf-token" $c.name) "optional" true "defaultMode" $d.token.mode "items" (list (dict "key" $d.token.key "path" $d.token.file)))) -}}
{{- if $p.gpu -}}
  {{- $mounts = concat $mounts (list (dict "name" $d.volumes.cache "mountPath" $c.cacheDir) (dict "name" $d.volumes.shm "mountPath" "/dev/shm")) -}}
  {{- $volumes = append $volumes (dict "name" $d.volumes.shm "emptyDir" (dict "medium" "Memory")) -}}
  {{- if $claim }}{{ $volumes = append $volumes (dict "name" $d.volumes.cache "persistentVolumeClaim" (dict "claimName" $claim)) }}{{ end -}}
{{- end -}}
{{- $container := dict "name" $d.containers.server "image" $c.image "imagePullPolicy" "Always" "env" $env "resources" $resources "securityContext" (deepCopy $d.container_security) "volumeMounts" $mounts -}}
{{- if $p.serves -}}
  {{- $_ := set $container "ports" (list (dict "name" "http" "containerPort" $p.port)) -}}
  {{- range $k, $probe := $d.probes }}{{ $_ := set $container $k (deepCopy $probe) }}{{ end -}}
{{- else if $p.helper -}}
  {{- /* a KV helper: its TCP port, checked by `kimi-serve healthcheck` */ -}}
  {{- $_ := set $container "ports" (list (dict "name" "tcp" "containerPort" $p.port)) -}}
  {{- range $k, $probe := $d.helper_probes }}{{ $_ := set $container $k (deepCopy $probe) }}{{ end -}}
{{- end -}}
{{- /* issue 30: preStop pause (through the drain for a process that serves no client), grace = pause + drain + margin */ -}}
{{- $stop := $d.stop -}}
{{- $grace := add $stop.pause_s $c.drain $stop.margin_s -}}
{{- $_ := set $container "lifecycle" (dict "preStop" (dict "sleep" (dict "seconds" (ternary $stop.pause_s (add $stop.pause_s $c.drain) (eq $p.serves true))))) -}}
{{- $containers := list $container -}}
{{- with $c.companion -}}{{- if $p.gpu -}}
  {{- /* LMCache's server beside the engine (k8s_kv.add_companions): bound to the pod, sharing its /dev/shm */ -}}
  {{- $cenv := append (deepCopy $settingsEnv) (dict "name" "KIMI_ROLE" "value" .role) -}}
  {{- range ($v.extraEnv | default list) }}{{ $cenv = append $cenv (dict "name" .name "value" .value) }}{{ end -}}
  {{- $cmounts := list -}}
  {{- range $d.scratch }}{{ $cmounts = append $cmounts (dict "name" (index . 0) "mountPath" (index . 1)) }}{{ end -}}
  {{- $cmounts = append $cmounts (dict "name" $d.volumes.shm "mountPath" "/dev/shm") -}}
  {{- $companion := dict "name" .role "image" $c.image "imagePullPolicy" "Always" "env" $cenv
        "resources" (dict "limits" (deepCopy .resources) "requests" (deepCopy .resources))
        "securityContext" (deepCopy $d.container_security) "volumeMounts" $cmounts -}}
  {{- range $k, $probe := $d.helper_probes }}{{ $_ := set $companion $k (deepCopy $probe) }}{{ end -}}
  {{- $_ := set $companion "lifecycle" (dict "preStop" (dict "sleep" (dict "seconds" (add $stop.pause_s $c.drain)))) -}}
  {{- $containers = append $containers $companion -}}
{{- end -}}{{- end -}}
{{- $podSec := ternary (deepCopy $hwf.pod_security) (deepCopy $f.router.pod_security) $p.gpu -}}
{{- $spec := dict "enableServiceLinks" false "automountServiceAccountToken" false "securityContext" $podSec "containers" $containers "volumes" $volumes -}}
{{- $_ := set $spec "terminationGracePeriodSeconds" $grace -}}
{{- if $p.gpu -}}
  {{- $dmounts := list -}}
  {{- range $mounts }}{{ if ne .mountPath "/dev/shm" }}{{ $dmounts = append $dmounts . }}{{ end }}{{ end -}}
  {{- $dres := dict -}}
  {{- range $kind, $am := $resources }}{{ $_ := set $dres $kind (pick $am "cpu" "memory") }}{{ end -}}
  {{- $_ := set $spec "initContainers" (list (dict "name" $d.containers.download "image" $c.image "imagePullPolicy" "Always" "args" (list "download") "env" $env "resources" $dres "securityContext" (deepCopy $d.container_security) "volumeMounts" $dmounts)) -}}
  {{- $_ := set $spec "nodeSelector" (merge (deepCopy ($v.nodeSelector | default dict)) $hwf.node_selector) -}}
{{- end -}}
{{- with $v.tolerations }}{{ $_ := set $spec "tolerations" . }}{{ end -}}
{{- with $v.affinity }}{{ $_ := set $spec "affinity" . }}{{ end -}}
{{- with $v.imagePullSecrets }}{{ $_ := set $spec "imagePullSecrets" . }}{{ end -}}
{{- $meta := dict "labels" (dict "app.kubernetes.io/name" $c.name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" $p.role) -}}
{{- $ann := merge (deepCopy ($v.podAnnotations | default dict)) (include "kimi.skips" (list $root $c $p) | fromJson) -}}
{{- if $ann }}{{ $_ := set $meta "annotations" $ann }}{{ end -}}
{{- toJson (dict "metadata" $meta "spec" $spec) -}}
{{- end -}}

{{/* kimi.claimSpec: the cache claim (k8s._cache_claim_spec, and persistence.*) */}}
{{- define "kimi.claimSpec" -}}
{{- $f := .Files.Get "files/facts.json" | fromJson -}}
{{- $spec := dict "accessModes" (list "ReadWriteOnce") "resources" (dict "requests" (dict "storage" (.Values.persistence.size | default $f.defaults.cache_size))) -}}
{{- with .Values.persistence.storageClassName }}{{ $_ := set $spec "storageClassName" . }}{{ end -}}
{{- toJson $spec -}}
{{- end -}}
