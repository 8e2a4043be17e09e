"""What a bench run against a rendered deployment looks like there (docs/bench.md): the client
runs beside the deployment, not in it, and reaches it the way its users do.

- `plan --format k8s-bench`: a Job `<name>-bench` in the deployment's namespace that runs
  `kimi-serve bench` once against the Service `<name>-api` (the JSON of the run is in the Job's
  log; charts and the summary go to an emptyDir at /results, or mount a claim there). Its own
  file, so `kubectl apply -f kubernetes.yaml` never starts a benchmark; hardened as the server pods.
- `plan --format compose-bench`: a one-shot service `<name>-bench` in a Compose file to add to
  the deployment's (`docker compose -f compose.yaml -f compose.bench.yaml run --rm <name>-bench`):
  it waits for the API service to be healthy, reaches it on loopback (host network) and writes
  its files to ./bench-results beside the files.

Both carry the deployment's KIMI_* settings, so bench reads the same launch plan (GPUs, hardware,
variant for the reference) and takes the tokenizer from the launch's model.
"""

from __future__ import annotations

from entrypoint.render import docker_compose, k8s
from entrypoint.render.deployment import (HF_TOKEN_PATH, TERMINATION_MESSAGE, image, serving_port, settings_env,
                                          token_path)
from entrypoint.render.k8s_pod import (container_security, pod_security, env_list, hf_token_secret, scratch_and_token,
                                       skip_annotations)
from entrypoint.render.yamltext import dump, dump_all

RESULTS_DIR = "/results"
RESULTS_VOLUME = "results"
HUB_VOLUME = "hub"  # the Job's own Hugging Face cache: the tokenizer files only (a few MB)
TIMEOUT_S = 6 * 3600  # bench's own --timeout; the Job's deadline adds the client's start-up
JOB_SLACK_S = 900
# The client is one Python process tokenizing the prompts of one level (640 x 8k tokens at c=64).
CLIENT_RESOURCES = {"cpu": "4", "memory": "16Gi"}
K8S_FILE = "bench-job.yaml"
COMPOSE_FILE = "compose.bench.yaml"
COMPOSE_RESULTS = "./bench-results"


def bench_name(launch) -> str:
    return f"{launch.name}-bench"


def _api_port(launch) -> int:
    """The port of the process clients reach (Plan.front)."""
    return launch.plan.front.port or serving_port(launch)


def bench_args(url: str, output_format: str) -> list:
    return ["bench", "--url", url, "--output", RESULTS_DIR, "--format", output_format, "--timeout", str(TIMEOUT_S)]


def client_job(launch, component: str, args: list, deadline_s: int, resources: dict, skip_reason: str,
               mounts=(), volumes=()) -> dict:
    """A one-shot Job beside the deployment that runs `kimi-serve <args>` against its Service,
    hardened as the server pods, with the deployment's settings (bench, verify)."""
    name, namespace = launch.name, launch.settings.namespace
    proc = launch.plan.front
    base_mounts, base_volumes = scratch_and_token(launch)
    env = env_list({**settings_env(launch), HF_TOKEN_PATH: token_path()})
    container = {"name": component, "image": image(launch), "imagePullPolicy": "Always", **TERMINATION_MESSAGE,
                 "args": list(args), "env": env,
                 "resources": {"limits": dict(resources), "requests": dict(resources)},
                 "securityContext": container_security(launch), "volumeMounts": base_mounts + list(mounts)}
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "kimi-serve",
              "app.kubernetes.io/component": component}
    skips = dict(skip_annotations(launch, proc))
    skips[f"checkov.io/skip{len(skips) + 1}"] = f"CKV_K8S_8={skip_reason}"
    skips[f"checkov.io/skip{len(skips) + 1}"] = f"CKV_K8S_9={skip_reason}"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{name}-{component}", "namespace": namespace, "labels": labels, "annotations": skips},
            "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 7 * 24 * 3600, "activeDeadlineSeconds": deadline_s,
                     "template": {"metadata": {"labels": labels, "annotations": skips},
                                  "spec": {"restartPolicy": "Never", "enableServiceLinks": False,
                                           "automountServiceAccountToken": False,
                                           "securityContext": pod_security(launch, proc),
                                           "containers": [container], "volumes": base_volumes + list(volumes)}}}}


def api_url(launch) -> str:
    return f"http://{launch.name}-api.{launch.settings.namespace}.svc:{_api_port(launch)}"


class K8sBench:
    deployment_environ = staticmethod(k8s.deployment_environ)

    @staticmethod
    def render(launch) -> dict:
        namespace = launch.settings.namespace
        url = api_url(launch)
        mounts = [{"name": RESULTS_VOLUME, "mountPath": RESULTS_DIR},
                  {"name": HUB_VOLUME, "mountPath": launch.settings.cache_dir}]
        volumes = [{"name": RESULTS_VOLUME, "emptyDir": {}}, {"name": HUB_VOLUME, "emptyDir": {}}]
        job = client_job(launch, "bench", bench_args(url, "json"), TIMEOUT_S + JOB_SLACK_S, CLIENT_RESOURCES,
                         "a one-shot benchmark client serves nothing to probe", mounts, volumes)
        header = (f"# kimi-serve bench against {url}, once (docs/bench.md). Apply after the deployment is ready:\n"
                  f"#   kubectl apply -f {K8S_FILE}; kubectl -n {namespace} wait --for=condition=complete "
                  f"--timeout={TIMEOUT_S + JOB_SLACK_S}s job/{bench_name(launch)}\n"
                  f"#   kubectl -n {namespace} logs job/{bench_name(launch)} > bench.json   # the run's JSON\n"
                  f"# The Hugging Face token comes from the optional Secret {hf_token_secret(launch)}, as for the "
                  "server.\n")
        return {K8S_FILE: header + dump_all([job])}


VERIFY_FILE = "verify-job.yaml"
VERIFY_DEADLINE_S = 1800  # a verify run takes seconds to minutes; a hang is cut here
VERIFY_RESOURCES = {"cpu": "1", "memory": "2Gi"}


class K8sVerify:
    """`plan --format k8s-verify`: a Job `<name>-verify` that runs `kimi-serve verify` once against
    the Service (docs/day2.md): the gate of a rollout, applied once the new pods are ready; its
    failure is the signal to roll back."""

    deployment_environ = staticmethod(k8s.deployment_environ)

    @staticmethod
    def render(launch) -> dict:
        name, namespace = launch.name, launch.settings.namespace
        url = api_url(launch)
        job = client_job(launch, "verify", ["verify", "--url", url], VERIFY_DEADLINE_S, VERIFY_RESOURCES,
                         "a one-shot verify client serves nothing to probe")
        header = (f"# kimi-serve verify against {url}, once: the gate of a rollout (docs/day2.md).\n"
                  f"#   kubectl -n {namespace} rollout status deploy/{name}  # or the LeaderWorkerSet, the router\n"
                  f"#   kubectl -n {namespace} delete job/{name}-verify --ignore-not-found; kubectl apply -f {VERIFY_FILE}\n"
                  f"#   kubectl -n {namespace} wait --for=condition=complete --timeout={VERIFY_DEADLINE_S}s "
                  f"job/{name}-verify || kubectl -n {namespace} rollout undo deploy/{name}\n")
        return {VERIFY_FILE: header + dump_all([job])}


class ComposeBench:
    deployment_environ = staticmethod(docker_compose.deployment_environ)

    @staticmethod
    def render(launch) -> dict:
        docker_compose.render(launch)  # the same refusals as the deployment's file (one node only)
        proc = launch.plan.front
        service = {"image": image(launch), "command": bench_args(f"http://127.0.0.1:{_api_port(launch)}", "text"),
                   **docker_compose.hardened(launch, proc), "network_mode": "host", "restart": "no",
                   "profiles": ["bench"],
                   "volumes": [f"{docker_compose.CACHE_VOLUME}:{launch.settings.cache_dir}",
                               f"{COMPOSE_RESULTS}:{RESULTS_DIR}"],
                   "depends_on": {docker_compose.service_name(launch, proc): {"condition": "service_healthy"}}}
        service["environment"] = {**settings_env(launch), HF_TOKEN_PATH: token_path()}
        doc = {"services": {bench_name(launch): service}, "volumes": {docker_compose.CACHE_VOLUME: {}},
               "secrets": {docker_compose.TOKEN_SECRET: {"file": docker_compose.TOKEN_SOURCE}}}
        header = (f"# kimi-serve bench against this node's deployment, once (docs/bench.md). With {docker_compose.FILE}:\n"
                  f"#   docker compose -f {docker_compose.FILE} -f {COMPOSE_FILE} run --rm {bench_name(launch)}\n"
                  f"# It waits for the API service to be healthy; its files go to {COMPOSE_RESULTS}/ (writable by UID "
                  f"{docker_compose.image_user(launch).uid}).\n")
        return {COMPOSE_FILE: header + dump(doc)}
