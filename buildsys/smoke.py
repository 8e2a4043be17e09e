"""Smoke test of a built image (no GPU): metadata, default launch, refusal, isolation, any UID."""

from __future__ import annotations

import json
from typing import List

from buildsys import engine, log
from buildsys.targets import RECIPES_DIR, Targets
from entrypoint.core.data.recipe import load_catalog_from

NS = 10**9


def check(cli, data: Targets, target: str, image: str) -> List[str]:
    """Return a list of problems (empty: the image is good)."""
    t = data.targets[target]
    problems: List[str] = []

    def expect(cond: bool, what: str) -> None:
        if not cond:
            problems.append(what)
        log(f"[{target}] smoke {'ok  ' if cond else 'FAIL'} {what}")

    attrs = cli.images.get(image).attrs
    cfg = attrs["Config"]
    lab = cfg.get("Labels") or {}
    env = dict(e.split("=", 1) for e in cfg.get("Env") or [])
    p = data.label_prefix
    expect(cfg.get("Entrypoint") == ["kimi-serve"], f"ENTRYPOINT is [kimi-serve] (got {cfg.get('Entrypoint')})")
    expect(not cfg.get("Cmd"), f"CMD is empty (got {cfg.get('Cmd')})")
    serving = load_catalog_from(RECIPES_DIR).serving
    user = serving.image.user
    expect(cfg.get("User") == str(user.uid) and env.get("HOME") == user.home,
           f"runs as recipes/serving.yaml's non-root user {user.uid} (numeric), HOME {user.home} "
           f"(got User={cfg.get('User')!r}, HOME={env.get('HOME')!r})")
    hc = cfg.get("Healthcheck") or {}
    expect(hc.get("Test") == ["CMD", "kimi-serve", "healthcheck"], f"HEALTHCHECK runs kimi-serve healthcheck (got {hc.get('Test')})")
    h = serving.health
    want = {"Interval": h.interval_s * NS, "Timeout": h.timeout_s * NS, "StartPeriod": h.start_period_s * NS,
            "Retries": h.retries}
    got = {k: hc.get(k) for k in want}
    expect(got == want, f"HEALTHCHECK timings are recipes/serving.yaml's (got {got})")
    expect(attrs.get("Architecture") == t.arch, f"architecture {t.arch} (got {attrs.get('Architecture')})")
    expect(lab.get(f"{p}.target") == target and lab.get(f"{p}.serves") == ",".join(t.serves)
           and lab.get(f"{p}.hardware") == t.hardware, "labels name the target and the hardware it serves")
    oci = ["source", "revision", "version", "created", "base.name"]
    if "@sha256:" in lab.get("org.opencontainers.image.base.name", "") or "org.opencontainers.image.base.digest" in lab:
        oci.append("base.digest")  # known for a pinned base and for a local build; a bake of an unpinned one omits it
    missing = [k for k in oci if not lab.get(f"org.opencontainers.image.{k}")]
    expect(not missing, f"OCI labels present (missing: {missing})")
    expect(env.get("KIMI_IMAGE_TARGET") == target and env.get("KIMI_IMAGE_HARDWARE") == t.hardware
           and env.get("KIMI_IMAGE_SERVES") == ",".join(t.serves), "image identity baked as KIMI_IMAGE_* env")

    # The default launch resolves (exit 0, JSON with a vllm argv).
    code, out, err = engine.run(cli, image, ["print", "--format", "json"], t.platform, environment=t.smoke_env)
    try:
        launch = json.loads(out)
        good = code == 0 and isinstance(launch.get("argv"), list) and launch["argv"][:1] == ["vllm"]
    except ValueError:
        good = False
    expect(good, f"`kimi-serve print --format json` resolves the default launch (exit {code}) {err.strip()[-300:]}")

    # Hardware the image does not serve is a clear start-up error (exit 2, one message).
    others = sorted({h for x in data.targets.values() for h in x.serves} - set(t.serves))
    if others:
        code, out, err = engine.run(cli, image, ["print", "--format", "json"], t.platform,
                                    environment={"KIMI_HARDWARE": others[0]})
        expect(code == 2 and err.strip().startswith("kimi-serve: error:") and others[0] in err,
               f"KIMI_HARDWARE={others[0]} is refused with exit 2 and a message (exit {code}: {err.strip()[:200]})")

    # The default user, on a read-only root filesystem with tmpfs scratch (as the rendered Compose
    # and Kubernetes deployments run it): HOME and /cache writable, and the entrypoint runs.
    code, out, err = engine.run(cli, image, ["-c", 'touch "$HOME/.w" /cache/.w /tmp/.w && kimi-serve print --format json >/dev/null'],
                                t.platform, entrypoint="sh", read_only=True,
                                tmpfs={"/tmp": "", "/cache": "", user.home: ""},
                                environment=t.smoke_env)
    expect(code == 0, f"the default user runs on a read-only root filesystem with scratch tmpfs (exit {code}) {err.strip()[-300:]}")

    # Any UID: HOME and /cache writable, and the entrypoint runs.
    code, out, err = engine.run(cli, image, ["-c", 'touch "$HOME/.w" /cache/.w && kimi-serve print --format json >/dev/null'],
                                t.platform, entrypoint="sh", user="4242:4242",
                                environment=t.smoke_env)
    expect(code == 0, f"runs as an arbitrary UID with HOME and /cache writable (exit {code}) {err.strip()[-300:]}")

    # Isolation: vLLM's own python sees nothing of /opt/kimi.
    # The entrypoint's own libraries stay out of vLLM's python; the weight loaders' packages
    # (/opt/kimi/loaders, after the base's own site-packages: docs/cold-start.md) are there for it.
    probe = ("import sys, importlib.util as u; "
             "bad = [p for p in sys.path if p.startswith('/opt/kimi') and p != '/opt/kimi/loaders'] + "
             "[m for m in ('pydantic', 'yaml', 'click', 'entrypoint') "
             "if (s := u.find_spec(m)) and (s.origin or '').startswith('/opt/kimi')]; print(bad); sys.exit(1 if bad else 0)")
    code, out, err = engine.run(cli, image, ["-c", probe], t.platform, entrypoint="python3")
    expect(code == 0, f"vLLM's python imports nothing of the entrypoint's from /opt/kimi (got {out.strip()})")
    return problems
