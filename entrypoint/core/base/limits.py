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
# Copies of one deployment: each is a full copy of a ~600 GB model on its own nodes; a fleet of 64
# copies of a multi-node group is already thousands of GPUs.
MAX_REPLICAS = 64
# Autoscaling on waiting requests per copy: vLLM's own default batch is 256 sequences.
MAX_SCALE_WAITING = 4096
# An SLO on latency: 10 minutes per token is not a latency any more.
MAX_SLO_MS = 600_000
# Integers are read from text; no setting needs more digits than a TCP port or a node count.
# KIMI_DRAIN_TIMEOUT: a day. A generation that runs longer is a hang; SageMaker's termination wait
# stops at an hour (render/sagemaker.py says so).
MAX_DRAIN_S = 86400
# KIMI_STOP_GRACE: a day's drain, and an hour for the pause before it and the exit after it.
MAX_STOP_GRACE_S = MAX_DRAIN_S + 3600
MAX_INT_DIGITS = 9
# Any one setting's text (paths, argument lines, address lists of MAX_ADDRESSES names).
MAX_SETTING_CHARS = 64 * 1024

# --- files -------------------------------------------------------------------------------------
MAX_CONFIG_BYTES = 1024 * 1024  # a KIMI_CONFIG TOML file: a few dozen keys fit in a few KiB
MAX_CONFIG_DEPTH = 4  # TOML nesting: a list of strings is depth 2; nothing we read is deeper
MAX_BATCH_LINE_BYTES = 1024 * 1024  # one `plan --batch` line: one object of KIMI_* variables
MAX_DATA_FILE_BYTES = 16 * 1024 * 1024  # one recipe data file (KIMI_RECIPES_DIR): the largest is ~40 KB
# The structure of one data file (YAML or JSON): the deepest recipe key is 7 levels down; the largest
# file (a vLLM grammar) holds ~15k values. Aliases are counted expanded ("billion laughs": a few
# hundred bytes of anchors that expand to 10^9 values are refused before anything walks them).
MAX_DATA_DEPTH = 32
MAX_DATA_NODES = 1_000_000
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

# --- the network -------------------------------------------------------------------------------
DNS_DEADLINE_S = 5.0  # one name lookup (a resolver answers in milliseconds; a stalled one never)

# --- HTTP (healthcheck, verify) ----------------------------------------------------------------
MAX_HTTP_HEADER_BYTES = 64 * 1024  # vLLM's headers are a few hundred bytes
MAX_HTTP_BODY_BYTES = 16 * 1024 * 1024  # a chat answer of 4096 tokens is ~50 KB; a stream ~1 MB
MAX_TIMEOUT_S = 3600.0  # --timeout: one hour; a request that needs longer is a hang
# The object-store check (doctor, preflight): one ListObjectsV2 of the model's prefix, 1000 keys at
# most (~300 KB of XML); the whole exchange, connect to last byte, within the deadline.
OBJECT_STORE_DEADLINE_S = 5.0
MAX_OBJECT_LISTING_BYTES = 4 * 1024 * 1024

# --- the weights volume's sample (doctor, preflight: the expected load time) --------------------
# A sequential read of one weights file: 256 MiB passes the drive's and the kernel's read-ahead
# (a few MiB) and takes 0.1-1 s at 0.3-2.5 GB/s; beside a 600 GB load it costs nothing.
LOAD_SAMPLE_BYTES = 256 * 1024 * 1024
LOAD_SAMPLE_BLOCK = 16 * 1024 * 1024  # one read: vLLM's loaders read in blocks of this order
LOAD_SAMPLE_DEADLINE_S = 3.0  # a slow network volume stops here; what was read so far is the sample
LOAD_SAMPLE_FILES = 512  # files looked at to find the sample's file (Kimi checkpoints have ~64 shards)
# The search for a model's weights (a local KIMI_MODEL, the hub cache's snapshots): a checkpoint is
# ~64 shards and a few dozen other files per snapshot, two levels down in the hub's layout. Links to
# directories are not followed (no loop); a slow network volume stops at the deadline.
MAX_WEIGHTS_ENTRIES = 65536
MAX_WEIGHTS_DEPTH = 6
WEIGHTS_SEARCH_DEADLINE_S = 5.0

# --- bench and verify under load ---------------------------------------------------------------
# Kimi's context is 256k tokens; a benchmark prompt or answer longer than that cannot be served.
MAX_BENCH_TOKENS = 262144
# A sweep: InferenceX's have 5-8 levels; 16 keeps a run (one client run per level) to hours, not days.
MAX_BENCH_LEVELS = 16
# Concurrent requests of one level: 4096 is 8x the largest published sweep point (512) and within
# what one client process can hold open.
MAX_BENCH_CONCURRENCY = 4096
MAX_BENCH_PROMPTS = 1_000_000  # --num-prompts: a day of requests at 10/s
# One saved result of `vllm bench serve` (no per-request detail asked): ~2 KiB; with detail ~1 KiB
# per request. 64 MiB holds the detailed result of MAX_BENCH_PROMPTS/16 requests.
MAX_BENCH_RESULT_BYTES = 64 * 1024 * 1024
MAX_BENCH_LOG_LINES = 40  # the client's last lines kept to explain a failure
MAX_BENCH_TIMEOUT_S = 7 * 24 * 3600.0  # bench --timeout: a week; a sweep that needs longer is a hang
# verify --concurrency: streams held open at once by one verify process (threads, one socket each).
MAX_VERIFY_CONCURRENCY = 256

# KIMI_HARDWARE=cpu (recipes/hardware.yaml host_backend): ranks per node, threads per rank and GB of
# memory per node, bounded like any setting: the largest CPU servers have 2 x 192 cores and 24 TB.
MAX_CPU_RANKS = 256
MAX_CPU_THREADS = 1024
MAX_CPU_MEMORY_GB = 65536
