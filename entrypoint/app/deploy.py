"""`kimi-serve plan --format <renderer>` (and the chart's facts): the launch a renderer draws and
the files it writes. The selection is made once, from the rendering environment; the renderer
then adds the addresses the deployment gives its own containers (pod DNS names, loopback), and
the launch is composed from that selection with those addresses, never from this machine's
network (no cluster wiring)."""

from __future__ import annotations

import os
from typing import Mapping, Optional, Tuple

from entrypoint.app.launch import Launch, launch_of, platform_launch
from entrypoint.core.base.errors import INVALID_VALUE, KimiError
from entrypoint.core.compose.launch import compose_launch, declared_facts, selection_of
from entrypoint.core.compose.select import Selection
from entrypoint.core.compose.settings import Settings, given_settings, read_settings
from entrypoint.core.data.platforms import platform as platform_data
from entrypoint.core.data.recipe import Catalog, load_catalog, with_recipe
from entrypoint.core.vllm.mask import written_secret
from entrypoint.render.deployment import platform_env


def _chosen(environ: Mapping[str, str]) -> Tuple[Settings, Catalog, Selection]:
    """(settings, catalog, selection) of the rendering environment, before any address is known:
    the nodes' facts as the settings declare them (never this machine's: core's declared_facts)."""
    settings = read_settings(environ)
    facts = declared_facts(settings)
    catalog = with_recipe(load_catalog(), settings.recipe)
    return settings, catalog, selection_of(settings, facts, catalog)


def deployment_launch(render_module, environ: Optional[Mapping[str, str]] = None) -> Launch:
    """The launch a renderer (compose, k8s, ...) draws: the environment plus the addresses the
    deployment gives its own containers, composed from the one selection."""
    environ = os.environ if environ is None else environ
    settings, catalog, selection = _chosen(environ)
    wired = read_settings(render_module.deployment_environ(environ, settings, selection))
    return launch_of(compose_launch(wired, declared_facts(wired), catalog, selection), given=given_settings(environ))


def deployment_notes(launch: Launch, environ: Optional[Mapping[str, str]] = None) -> list:
    """What a reader of the rendering should know that no refusal says: the interface between the
    nodes, when KIMI_IFACE is unset (each container finds its own at its start: never this
    machine's, which is not where the deployment runs)."""
    environ = os.environ if environ is None else environ
    if (launch.settings.iface or "").lower() != "auto" or read_settings(environ).iface:  # set (file or env)
        return []
    return ["KIMI_IFACE is unset: the rendered containers run with KIMI_IFACE=auto, each finding the interface "
            "between the nodes at its start (its default route's, logged), not this machine's. Set KIMI_IFACE to "
            "name it."]


def deployment_files(render_module, environ: Optional[Mapping[str, str]] = None, notes: Optional[list] = None) -> dict:
    """The files a renderer writes ({name: text}); `notes`, when given, receives deployment_notes.
    A file that would write a secret down is refused. For a cloud platform with a port/bind
    contract, the rendered container's own start is also composed here (to its launch, not exec)
    as the platform will start it, so that a container the platform would see exit 2 is refused
    before anything is written."""
    launch = deployment_launch(render_module, environ)
    files = render_module.render(launch)
    if notes is not None:
        notes += deployment_notes(launch, environ)
    refuse_written_secrets(files, os.environ if environ is None else environ)
    pid = getattr(render_module, "PID", None)
    if pid:
        found = platform_data(pid)
        if any(b.binding == "contract" for b in found.contract.values()):  # one container per instance
            platform_launch(platform_env(launch, pid), tuple(found.detect.args[:1]))
    return files


def refuse_written_secrets(files: Mapping[str, str], environ: Mapping[str, str]) -> None:
    """A rendered file that would write a secret down (a URL's password, a credential option's
    value, a secret-named variable's value, a token read from a file) is refused for every format,
    on stdout as under --output: what is printed is what is deployed, and no secret sits in a
    manifest."""
    for name, text in files.items():
        where = written_secret(text, environ)
        if where:
            raise KimiError(INVALID_VALUE, f"{name} would write down a secret ({where}). Take the credentials "
                            "out of the setting and give them from a secret store: an s3:// or gs:// model's keys as "
                            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or the platform's identity), the API key as "
                            "VLLM_API_KEY, the hub token as HF_TOKEN_PATH's file (a Kubernetes Secret, the shell that "
                            "runs Compose).")
