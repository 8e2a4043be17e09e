"""Run under the vLLM venv's Python (it has OpenAI's SDK, openai 3.x): stream one completion through
URL with OpenAI's own client and print, as JSON, what the client saw: the chunks' text, the
finish_reason, and the exception the SDK raised (its class and message), if any; a line
`{"first_chunk": true}` as soon as the first chunk arrives (mid-stream from then on). Before the first
chunk (before the test's fault), the router's 503 "No available workers" is waited out for up to 20 s,
as tests/live/shape.py `post` does: on two busy cores an engine's /health can miss the router's 3 s
timeout twice (seen in a busy full run, 2026-12-06: the PD module's stream got the router's 503 before
its decode engine was killed).
    python openai_stream.py URL MODEL MAX_TOKENS"""

import json
import sys
import time

import openai

url, model, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
seen = {"chunks": 0, "finish_reason": None, "raised": None, "message": None}


def stream():
    readmit_by = time.monotonic() + 20
    while True:
        try:
            return client.completions.create(model=model, prompt="Tell the long story of the harbor archive.",
                                             max_tokens=max_tokens, temperature=0, stream=True,
                                             extra_body={"ignore_eos": True})
        except openai.APIStatusError as exc:
            text = exc.response.text.lower()  # vllm-router's: "No available workers", "no healthy decode workers"
            if exc.status_code != 503 or not ("no available" in text or "no healthy" in text) \
                    or time.monotonic() > readmit_by:
                raise
            time.sleep(2)


try:
    for chunk in stream():
        seen["chunks"] += 1
        if seen["chunks"] == 1:
            print(json.dumps({"first_chunk": True}), flush=True)  # the test kills the copies now
        if chunk.choices and chunk.choices[0].finish_reason:
            seen["finish_reason"] = chunk.choices[0].finish_reason
except Exception as exc:  # noqa: BLE001 - what the SDK raised is the figure
    seen["raised"], seen["message"] = type(exc).__name__, str(exc)[:500]
print(json.dumps(seen), flush=True)
