"""The facts the tests read, all inside the repository (tests/data/, see its PROVENANCE.md).

Every file under tests/data/ is listed with its sha256 in tests/data/SHA256SUMS
(tests/test_testdata.py checks both ways); nothing a test reads lives outside the checkout.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
GOLDEN_DIR = DATA / "golden"
GOLDEN = GOLDEN_DIR / "kimi-k2.5.json"
GOLDEN_KV = GOLDEN_DIR / "kimi-k2.5-kv.json"
KV_STORES = DATA / "vllm-recipes" / "kv_store"
COMPOSE_SPEC = DATA / "compose-spec.json"
K8S_CRDS = DATA / "k8s"
TAXONOMY = DATA / "vllm-recipes" / "taxonomy.yaml"
SUMS = DATA / "SHA256SUMS"
