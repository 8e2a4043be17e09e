"""plan's own objects for the chart to copy (files/facts.json): rendered for a probe, each value that
varies with the settings or the chart's values replaced by a placeholder the chart's `kimi.fill`
fills (charts/kimi-serve/templates/_helpers.tpl), so the chart draws them with no rule of its own.

A placeholder is `"@{k}"` where a whole JSON value (a number, a list, a map) is the probe's value
of `k`, and `${k}` inside a string where part of it (or all of it) is. Each copy is proven here
when it is generated: filled with a second probe's values, it is that probe's rendering, object
for object (`proven`); a constant that happened to equal a probe's value fails it.
"""

from __future__ import annotations

import json

# a probe's names, replaced by placeholders: neither is part of the other, nor of anything rendered
PROBE_NAME, PROBE_NAMESPACE = "probe-release-x", "probe-ns-x"
OTHER_NAME, OTHER_NAMESPACE = "other-release-y", "other-ns-y"


def placeheld(objects, values: dict):
    """`objects` with `values` (placeholder -> the probe's value) as placeholders."""
    whole = [(k, v) for k, v in values.items() if not isinstance(v, str)]
    parts = sorted(((k, str(v)) for k, v in values.items() if isinstance(v, str) or (isinstance(v, int) and v > 9)),
                   key=lambda kv: -len(kv[1]))

    def text(s: str) -> str:
        for k, v in parts:
            s = s.replace(v, "${%s}" % k)
        return s

    def walk(node):
        for k, v in whole:
            if type(node) is type(v) and node == v:
                return "@{%s}" % k
        if isinstance(node, dict):
            return {text(k): walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return text(node) if isinstance(node, str) else node

    return walk(objects)


def fill(objects, values: dict):
    """What the chart's kimi.fill does: each placeholder filled, in the order of its names; what a fill
    writes has its `${` and `@{` escaped (the same text once parsed), so no value is taken for a placeholder."""
    out = json.dumps(objects)
    for k, v in sorted(values.items()):
        as_json = json.dumps(v, separators=(",", ":")).replace("${", "$\\u007b").replace("@{", "@\\u007b")
        out = out.replace('"@{%s}"' % k, as_json).replace("${%s}" % k, as_json[1:-1] if isinstance(v, str) else as_json)
    return json.loads(out)


def proven(objects, values: dict, other, other_values: dict):
    """`objects` placeheld, after proving that the placeheld copy filled with `other_values` is `other`."""
    copy = placeheld(objects, values)
    if fill(copy, other_values) != other:
        raise AssertionError(f"a copy of plan's objects does not fill to a second probe's: {json.dumps(copy)[:400]}")
    return copy


def settings_env(**settings) -> dict:
    """Settings as a probe's environment: KIMI_<NAME>=value."""
    return {f"KIMI_{k.upper()}": str(v) for k, v in settings.items()}


def probe_env(slug: str, hw: str, sid: str, **settings) -> dict:
    """A probe's environment: the recipe, hardware and strategy, with more settings."""
    return {"KIMI_RECIPE": slug, "KIMI_HARDWARE": hw, "KIMI_STRATEGY": sid, **settings_env(**settings)}


def probe(launch_env, env: dict, name: str, namespace: str, **settings):
    """A probe launch of `env` named `name` in `namespace`, with more settings (KIMI_<NAME>=value)."""
    return launch_env({**env, "KIMI_NAME": name, "KIMI_NAMESPACE": namespace, **settings_env(**settings)})


# the operating settings of the two probes (unlike any constant of the objects they render)
PROBES = ({"slo_ttft_ms": 48611, "slo_itl_ms": 3917, "replicas": 3, "max_replicas": 17, "scale_waiting": 4093,
           "scale_kv_percent": 89, "prometheus_url": "http://probe-prometheus-x:9090"},
          {"slo_ttft_ms": 1500, "slo_itl_ms": 80, "replicas": 2, "max_replicas": 6, "scale_waiting": 12,
           "scale_kv_percent": 70, "prometheus_url": "http://other-prometheus-y:9090"})


def monitoring(launch_env, single: dict, pd: dict) -> dict:
    """render/monitoring.py's objects (KIMI_MONITORING=1): a single-node probe's, proven by a PD probe's.
    Placeholders: the release's names, `match` (the deployment's series), `components` (its serving
    components), the SLOs, `interval` (the chart's monitoring.interval, else `interval`'s default) and
    `dashboard` (files/dashboard.json, not repeated here)."""
    from entrypoint.render import monitoring as mon

    def values(launch, name, namespace, operating):
        return {"name": name, "namespace": namespace, "match": mon.match(launch),
                "components": mon.engine_components(launch), "dashboard": mon.dashboard_json(launch.catalog),
                **{k: operating[k] for k in ("slo_ttft_ms", "slo_itl_ms")}}

    copies = []
    for env, name, namespace, operating in ((single, PROBE_NAME, PROBE_NAMESPACE, PROBES[0]),
                                            (pd, OTHER_NAME, OTHER_NAMESPACE, PROBES[1])):
        launch = probe(launch_env, env, name, namespace, monitoring=1, **operating)
        copies.append((mon.objects(launch), values(launch, name, namespace, operating)))
    objects = proven(*copies[0], *copies[1])
    interval = {"interval": f"{mon.facts(launch.catalog).interval_s}s"}
    for endpoint in objects[0]["spec"]["podMetricsEndpoints"]:
        assert endpoint["interval"] == interval["interval"]
        endpoint["interval"] = "${interval}"  # the chart's value, else this
    return {"objects": objects, "match": matchers(launch_env, single), **interval}


def matchers(launch_env, single: dict) -> dict:
    """render/monitoring.match's PromQL matchers of a deployment's engine series: of all its engines
    (`all`), of one component's (`one`) and of several (`many`); the release's names and the components
    (`${component}`; several `${components}`, joined by `separator`) as placeholders, proven by a second
    probe's."""
    from entrypoint.render import monitoring as mon

    copies = []
    for name, namespace, components in ((PROBE_NAME, PROBE_NAMESPACE, ("probe-comp-a", "probe-comp-b")),
                                        (OTHER_NAME, OTHER_NAMESPACE, ("other-comp-c", "other-comp-d"))):
        launch = probe(launch_env, single, name, namespace)
        many = mon.match(launch, components)
        joined = many[many.rindex('"', 0, -1) + 1:-1]  # the components as the matcher writes several
        separator = joined[len(components[0]):-len(components[1])]
        copies.append(({"all": mon.match(launch), "one": mon.match(launch, components[:1]), "many": many, "separator": separator},
                       {"name": name, "namespace": namespace, "components": joined, "component": components[0]}))
    return proven(*copies[0], *copies[1])


def autoscaling(launch_env, single: dict, groups: dict) -> dict:
    """render/autoscaling.py's objects of one engine group, per engine (keda, hpa), and its
    PodDisruptionBudget: a single-node probe's, proven by a second's; and the `rollout` of an
    autoscaled group. Placeholders: the group's
    `meta`, `ref` and `pod_labels`, `match` (its serving components' series) and the operating
    settings."""
    from entrypoint.render import monitoring as mon

    out: dict = {}
    for engine in ("keda", "hpa"):
        copies = []
        for name, namespace, operating in ((PROBE_NAME, PROBE_NAMESPACE, PROBES[0]), (OTHER_NAME, OTHER_NAMESPACE, PROBES[1])):
            launch = probe(launch_env, single, name, namespace, autoscaling=engine, router="none", **operating)
            objects = rendered(launch)
            (group,) = [o for o in objects if o["kind"] == "Deployment"]
            meta = group["metadata"]
            kept = [o for o in objects if o["kind"] in ("ScaledObject", "HorizontalPodAutoscaler", "PodDisruptionBudget")]
            values = {"meta": {k: meta[k] for k in ("name", "namespace", "labels")},
                      "ref": {"apiVersion": group["apiVersion"], "kind": group["kind"], "name": meta["name"]},
                      "pod_labels": group["spec"]["selector"]["matchLabels"],
                      "match": mon.match(launch, [launch.plan.first_engine.role]),
                      **{k: v for k, v in operating.items() if k not in ("slo_ttft_ms", "slo_itl_ms")}}
            copies.append((kept, values))
        scaler, pdb = proven(*copies[0], *copies[1])
        out[engine] = scaler
        out["pdb"] = pdb
    return {**out, "rollout": rollout(launch_env, groups)}


def _delta(before, after):
    """What `after` sets that `before` does not have (maps compared key by key)."""
    if isinstance(before, dict) and isinstance(after, dict):
        return {k: _delta(before.get(k), v) for k, v in after.items() if before.get(k) != v}
    return after


def rollout(launch_env, groups: dict) -> dict:
    """What autoscaling.apply sets on an autoscaled group, per kind (a Deployment's rollout, deadline and
    zone spread; a LeaderWorkerSet's rollout): the difference between a probe's group with and without
    an autoscaler, with the deadline (`progress_deadline`) and the group's `pod_labels` as placeholders.
    `groups`: kind -> two probes, the second proving the first's (another recipe: another start-up bound)."""
    out = {}
    for kind, envs in groups.items():
        copies = []
        for env, name in zip(envs, (PROBE_NAME, OTHER_NAME)):
            plain, scaled = [[o for o in rendered(probe(launch_env, env, name, PROBE_NAMESPACE, autoscaling=engine, router="none",
                                                         replicas=2)) if o["kind"] == kind][0] for engine in ("off", "keda")]
            patch = _delta(plain, scaled)
            copies.append((patch, {"progress_deadline": patch["spec"].get("progressDeadlineSeconds"),
                                   "pod_labels": (plain["spec"].get("selector") or {}).get("matchLabels")}))
        out[kind] = proven(*copies[0], *copies[1])
    return out


def rendered(launch) -> list:
    """plan's objects (`plan --format k8s`) for the launch."""
    import yaml

    from entrypoint.render import k8s

    (text,) = k8s.render(launch).values()
    return [d for d in yaml.safe_load_all(text) if d]


WORKLOADS = ("Deployment", "StatefulSet", "LeaderWorkerSet")


def _names(launch) -> dict:
    """The names in `launch`'s rendering: each workload's by its component (`single`, `head`, `prefill`,
    `router`, `instance`, ...), the cache claim's (`cache`), the settings ConfigMap's (`settings`), the API
    Service's (`api`), a Gateway's InferencePool's (`pool`), the token's Secret (`token`) and, behind a fleet's router, the head's address its
    plan resolves with (`head_addr`)."""
    from entrypoint.render import k8s_pod

    out = {"token": k8s_pod.hf_token_secret(launch)}
    for o in rendered(launch):
        meta = o["metadata"]
        component = meta.get("labels", {}).get("app.kubernetes.io/component")
        key = {"PersistentVolumeClaim": "cache", "ConfigMap": component, "Service": component,
               "InferencePool": "pool"}.get(o["kind"])
        if o["kind"] in WORKLOADS or key in ("cache", "settings", "api", "pool"):
            out.setdefault(key or component, meta["name"])
        for container in ((o.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers", ()):
            for e in container.get("env", ()):
                if e["name"] == "KIMI_HEAD_ADDR":
                    out["head_addr"] = e["value"]
    return out


def names(launch_env, envs) -> dict:
    """What plan names each object the chart draws (and a multi-node copy's head address), read from probe
    renderings of every shape in `envs` (a single node, a PD cluster, a multi-node fleet, a KV store of
    instances behind its router), the release's name as `${name}`; and the labels of a component's objects
    (k8s_objects.component_labels, `${component}`); proven by the same probes named otherwise."""
    from entrypoint.render import k8s_objects

    copies = []
    for name, component in ((PROBE_NAME, "probe-comp-a"), (OTHER_NAME, "other-comp-b")):
        found: dict = {}
        for env in envs:
            launch = probe(launch_env, env, name, PROBE_NAMESPACE)
            found.update(_names(launch))
        labels = k8s_objects.component_labels(launch, component)
        copies.append(({"names": found, "labels": labels}, {"name": name, "component": component}))
    return proven(*copies[0], *copies[1])


def exposed(launch_env, pd: dict, single: dict) -> list:
    """The API Service and the NetworkPolicies (render/k8s_objects.py exposed): a PD probe's (its router
    in front), proven by a single-node probe's. Placeholders: the release's names, the API pods'
    `selector` and `port`, the engines' serving `components`, `metrics_ports` and the `scraper` peer,
    and the Service's own port (`service_port`: the chart's service.port, else `port`)."""
    from entrypoint.render import k8s_objects
    from entrypoint.render import monitoring as mon

    copies = []
    for env, names, more in ((pd, (PROBE_NAME, PROBE_NAMESPACE), {"router_port": 8123}),
                             (single, (OTHER_NAME, OTHER_NAMESPACE), {"port": 9123, "scraper_labels": "app=prom-y"})):
        launch = probe(launch_env, env, *names, **more)
        kept = {("Service", f"{names[0]}-api")} | {("NetworkPolicy", f"{names[0]}-{s}") for s in ("api", "internal", "metrics")}
        objects = [o for o in rendered(launch) if (o["kind"], o["metadata"]["name"]) in kept]
        service = objects[0]["spec"]
        port = service["ports"][0]["port"]
        copies.append((objects, {"name": names[0], "namespace": names[1], "selector": service["selector"], "port": port,
                                 "service_port": port, "components": mon.engine_components(launch),
                                 "metrics_ports": [{"protocol": "TCP", "port": p} for p in k8s_objects.metrics_ports(launch)],
                                 "scraper": k8s_objects.scraper(launch)}))
    objects = proven(*copies[0], *copies[1])
    objects[0]["spec"]["ports"][0]["port"] = "@{service_port}"
    return objects


def _hollow(template: dict) -> dict:
    """A pod template of plan's with its slots, what the chart computes for each pod, as placeholders
    (`"@{k}"`, `${k}`): its labels and annotations, grace period, pod security and
    node selector; every container's image and pull policy; the server's (and the download step's) env
    and resources, a companion's env; the API server's startup probe's bound; the token Secret's name and key. The
    cache volume is left out: the chart gives it (a claim, the user's volume, or a claim template)."""
    t = json.loads(json.dumps(template))

    def slot(node: dict, key: str, name: str) -> None:
        if key in node:
            node[key] = "@{%s}" % name

    meta, spec = t["metadata"], t["spec"]
    for key in ("labels", "annotations"):
        slot(meta, key, key)
    for key, name in (("terminationGracePeriodSeconds", "grace"), ("securityContext", "pod_security"),
                      ("nodeSelector", "node_selector")):
        slot(spec, key, name)
    server, *others = spec["containers"]
    for c in [server, *others, *spec.get("initContainers", ())]:
        c["image"], c["imagePullPolicy"] = "${image}", "${pull_policy}"
    slot(server, "env", "env")
    for kind in ("limits", "requests"):
        slot(server["resources"], kind, kind)
    if any(p["name"] == "http" for p in server.get("ports", ())):  # the API server's start-up bound
        slot(server["startupProbe"], "failureThreshold", "failure_threshold")
    for c in spec.get("initContainers", ()):
        slot(c, "env", "env")
        for kind in ("limits", "requests"):
            slot(c["resources"], kind, f"download_{kind}")
    for c in others:
        slot(c, "env", "companion_env")
    spec["volumes"] = [v for v in spec["volumes"] if "persistentVolumeClaim" not in v]
    for v in spec["volumes"]:
        if "secret" in v:
            v["secret"]["secretName"] = "${token_secret}"
            (item,) = v["secret"]["items"]
            item["key"] = "${token_key}"
    return t


def _pairs(launch_env, kinds: dict, copy_of, more: tuple = ({}, {})) -> dict:
    """kind -> two probes (an env and what `copy_of(launch, what)` takes of its launch: a copy and its
    values), named apart and with `more` settings each; the first's copy, proven by the second's."""
    out = {}
    for kind, pair in kinds.items():
        copies = [copy_of(probe(launch_env, env, name, PROBE_NAMESPACE, **extra), what)
                  for (env, what), name, extra in zip(pair, (PROBE_NAME, OTHER_NAME), more)]
        out[kind] = proven(*copies[0], *copies[1])
    return out


def pods(launch_env, kinds: dict) -> dict:
    """plan's pod templates the chart fills (kimi.pod), by kind: `serving` (a GPU process that serves the API,
    and the chart adds its cache volume), `headless` (a GPU process that serves none: a multi-node worker),
    `helper` (a KV store's master or store: no GPU, its TCP port), `router` (no GPU, serves the API) and
    `companion` (the engine's pod with LMCache's server beside it). `kinds`: kind -> two probes (an env and
    a picker of the template in its rendering), the second proving the first's copy (`_hollow`'s slots, and
    the server's port and cache folder as placeholders)."""
    def copy_of(launch, pick) -> tuple:
        template = _hollow(pick(rendered(launch)))
        port = next((p["containerPort"] for p in template["spec"]["containers"][0].get("ports", ())), None)
        return template, {"name": launch.name, "cache_dir": launch.settings.cache_dir, **({"port": port} if port else {})}

    return _pairs(launch_env, kinds, copy_of, ({"port": 8123, "router_port": 8124, "cache_dir": "/probe-cache-x"},
                                               {"port": 9123, "router_port": 9124, "cache_dir": "/other-cache-y"}))


def _hollow_group(objects: list) -> list:
    """A group's objects as plan renders them (its workload, and a KV helper's Service), with what the
    chart gives each group as slots: the objects' metadata (`meta`, `service_meta`), the pods' labels
    (`pod_labels`), the pod templates (`pod`; a LeaderWorkerSet's `leader` and `worker`), the claim
    templates (`claims`), a StatefulSet's `replicas` and Service (`${group}`), a set's `size`, the
    Service's `port`."""
    out = json.loads(json.dumps(objects))
    for o in out:
        spec = o["spec"]
        o["metadata"] = "@{service_meta}" if o["kind"] == "Service" else "@{meta}"
        if o["kind"] == "Service":
            spec["selector"] = "@{pod_labels}"
            for port in spec.get("ports", ()):
                port["port"] = "@{port}"
            continue
        for key, slot in (("template", "pod"), ("volumeClaimTemplates", "claims")):
            if key in spec:
                spec[key] = "@{%s}" % slot
        if "selector" in spec:
            spec["selector"]["matchLabels"] = "@{pod_labels}"
        if o["kind"] == "StatefulSet":
            spec["replicas"], spec["serviceName"] = "@{replicas}", "${group}"
        lwt = spec.get("leaderWorkerTemplate", {})
        for key, slot in (("size", "size"), ("leaderTemplate", "leader"), ("workerTemplate", "worker"),
                          ("volumeClaimTemplates", "claims")):
            if key in lwt:
                lwt[key] = "@{%s}" % slot
    return out


def groups(launch_env, kinds: dict) -> dict:
    """plan's objects of each kind of group the chart draws (kimi.workloads, templates/_workloads.tpl), hollowed (`_hollow_group`):
    kind -> two probes (an env and the (kind, component) of the group's objects), the second proving the
    first's."""
    def copy_of(launch, wanted) -> tuple:
        objects = rendered(launch)
        kept = [o for w in wanted for o in objects if (o["kind"], o["metadata"]["labels"].get("app.kubernetes.io/component")) == w]
        assert len(kept) == len(wanted), wanted
        return _hollow_group(kept), {}

    return _pairs(launch_env, kinds, copy_of)
