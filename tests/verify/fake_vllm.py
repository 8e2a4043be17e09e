"""A stand-in for the `vllm` command's `bench serve` (vLLM 0.32.0): it writes the recorded result
(tests/data/vllm-0.32.0/bench-serve-result.json) where --result-dir/--result-filename say, with
--max-concurrency and --num-prompts filled in, after printing a tqdm bar as the real client does.

FAKE_VLLM_MODE: ok (default) | hang (prints the bar's start, then sleeps; writes its pid to
FAKE_VLLM_PIDFILE) | fail (exits 1 with vLLM's own words for an unreachable server) | failed_requests
(the result says 2 requests failed). FAKE_VLLM_SAY: words the fail mode adds to its error. FAKE_VLLM_ARGV: a file each call appends its argv and HF_HOME to (a JSON line).
"""

import json
import os
import sys
import time
from pathlib import Path

RESULT = Path(__file__).parents[1] / "data" / "vllm-0.32.0" / "bench-serve-result.json"


def flag(argv: list, name: str) -> str:
    return argv[argv.index(name) + 1]


def main(argv: list) -> int:
    if os.environ.get("FAKE_VLLM_ARGV"):
        with open(os.environ["FAKE_VLLM_ARGV"], "a") as fh:
            fh.write(json.dumps({"argv": argv, "HF_HOME": os.environ.get("HF_HOME")}) + "\n")
    if argv == ["--version"]:
        print("0.32.0")
        return 0
    assert argv[:2] == ["bench", "serve"], argv
    mode = os.environ.get("FAKE_VLLM_MODE", "ok")
    prompts = int(flag(argv, "--num-prompts"))
    if mode == "fail":
        print("ValueError: Initial test run failed - Please make sure benchmark arguments are correctly specified. "
              "Error: Cannot connect to host" + os.environ.get("FAKE_VLLM_SAY", ""), file=sys.stderr)
        return 1
    sys.stderr.write(f"  0%|          | 0/{prompts} [00:00<?, ?it/s]")
    sys.stderr.flush()
    if mode == "hang":
        Path(os.environ["FAKE_VLLM_PIDFILE"]).write_text(str(os.getpid()))
        time.sleep(600)
    result = json.loads(RESULT.read_text())
    result.update(max_concurrency=int(flag(argv, "--max-concurrency")), num_prompts=prompts,
                  completed=prompts - (2 if mode == "failed_requests" else 0),
                  failed=2 if mode == "failed_requests" else 0)
    sys.stderr.write(f"\r100%|##########| {prompts}/{prompts} [00:00<00:00, 30.0it/s]\n")
    out = Path(flag(argv, "--result-dir")) / flag(argv, "--result-filename")
    out.write_text(json.dumps(result))
    print("============ Serving Benchmark Result ============")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
