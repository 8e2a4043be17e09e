"""Run under the vLLM venv's Python (it has OpenAI's SDK, openai 3.x): stream one completion through
URL with OpenAI's own client and print, as JSON, what the client saw: the chunks' text, the
finish_reason, and the exception the SDK raised (its class and message), if any; a line
`{"first_chunk": true}` as soon as the first chunk arrives (mid-stream from then on).
    python openai_stream.py URL MODEL MAX_TOKENS"""

import json
import sys

import openai

url, model, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
seen = {"chunks": 0, "finish_reason": None, "raised": None, "message": None}
try:
    for chunk in client.completions.create(model=model, prompt="Tell the long story of the harbor archive.",
                                           max_tokens=max_tokens, temperature=0, stream=True,
                                           extra_body={"ignore_eos": True}):
        seen["chunks"] += 1
        if seen["chunks"] == 1:
            print(json.dumps({"first_chunk": True}), flush=True)  # the test kills the copies now
        if chunk.choices and chunk.choices[0].finish_reason:
            seen["finish_reason"] = chunk.choices[0].finish_reason
except Exception as exc:  # noqa: BLE001 - what the SDK raised is the figure
    seen["raised"], seen["message"] = type(exc).__name__, str(exc)[:500]
print(json.dumps(seen), flush=True)
