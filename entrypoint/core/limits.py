"""Upper bounds on every input kimi-serve reads, in one place, each with the reason for its value.

A value past a bound is a usage error (exit 2) that names the bound, never a hang, a traceback or
unbounded memory. docs/reliability.md lists them; tests/edges checks each one.
"""

from __future__ import annotations

# --- deployments -------------------------------------------------------------------------------
# The largest single-model vLLM deployments published run a few dozen nodes per pool (DeepSeek's
# decode units: 40 nodes; GB200 NVL72 racks hold 18 trays). 256 nodes (2048 GPUs at 8 per node)
# leaves room for 6x that, and keeps every rendered plan to a few thousand lines.
MAX_NODES = 256
MAX_POOL_NODES = MAX_NODES
MAX_ADDRESSES = MAX_NODES  # entries of KIMI_PREFILL_ADDRS / KIMI_DECODE_ADDRS
# Kubernetes object names are DNS-1035 labels (63 characters); a rendered name adds at most
# "-prefill-leader-0-0"-style suffixes and the LWS/StatefulSet controller adds hashes, so the
# deployment name keeps 40 for itself.
MAX_NAME_LENGTH = 40
# Integers are read from text; no setting needs more digits than a TCP port or a node count.
MAX_INT_DIGITS = 9
# Any one setting's text (paths, argument lines, address lists of MAX_ADDRESSES names).
MAX_SETTING_CHARS = 64 * 1024

# --- files -------------------------------------------------------------------------------------
MAX_CONFIG_BYTES = 1024 * 1024  # a KIMI_CONFIG TOML file: a few dozen keys fit in a few KiB
MAX_CONFIG_DEPTH = 4  # TOML nesting: a list of strings is depth 2; nothing we read is deeper
MAX_BATCH_LINE_BYTES = 1024 * 1024  # one `plan --batch` line: one object of KIMI_* variables
MAX_KEY_FILE_BYTES = 64 * 1024  # a credentials file (a GCS service-account key is ~2.3 KB)
MAX_NODE_FILE_BYTES = 1024 * 1024  # one /proc or /sys file, a hub ref: /proc/mounts of a busy node is ~100 KB

# --- the node ----------------------------------------------------------------------------------
MAX_GPUS_PER_NODE = 64  # 8 on every supported system (4 on GB200/GB300 trays); 64 leaves room
MAX_GPU_MEMORY_BYTES = 16 * 1024 ** 4  # 16 TiB per GPU: 50x the largest GPU we serve (288 GB)
MAX_TOOL_OUTPUT_BYTES = 4 * 1024 * 1024  # nvidia-smi / amd-smi / rocm-smi JSON for 64 GPUs: ~1 MiB
TOOL_DEADLINE_S = 15.0  # total time for one GPU tool run (amd-smi takes ~2 s on an 8-GPU node)
# Slurm host lists: the largest Slurm clusters have tens of thousands of nodes.
MAX_NODELIST_CHARS = 64 * 1024
MAX_NODELIST_HOSTS = 65536

# --- HTTP (healthcheck, verify) ----------------------------------------------------------------
MAX_HTTP_HEADER_BYTES = 64 * 1024  # vLLM's headers are a few hundred bytes
MAX_HTTP_BODY_BYTES = 16 * 1024 * 1024  # a chat answer of 4096 tokens is ~50 KB; a stream ~1 MB
MAX_TIMEOUT_S = 3600.0  # --timeout: one hour; a request that needs longer is a hang
# The object-store check (doctor, preflight): one ListObjectsV2 of the model's prefix, 1000 keys at
# most (~300 KB of XML); the whole exchange, connect to last byte, within the deadline.
OBJECT_STORE_DEADLINE_S = 5.0
MAX_OBJECT_LISTING_BYTES = 4 * 1024 * 1024
