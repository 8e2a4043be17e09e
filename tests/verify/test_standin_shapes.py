"""The stand-in server answers in real vLLM 0.32.0's shapes (tests/data/vllm-0.32.0/responses.json,
recorded from a real server; see PROVENANCE.md there): same status, same keys at every level, same
JSON types, and for errors the same message."""

import json
from pathlib import Path

import httpx
import pytest
from standin_server import MODEL_PATH, SERVED_NAME, VLLM_VERSION

RECORDED = json.loads((Path(__file__).parents[1] / "data" / f"vllm-{VLLM_VERSION}" / "responses.json").read_text())
SUM = {"role": "user", "content": "What is 17 + 25? Reply with the number only."}
LETTER = {"role": "user", "content": "How many r's are in the word strawberry?"}
TOOL = {"type": "function", "function": {"name": "count_letter_in_string", "description": "Count", "parameters": {
    "type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a", "b"]}}}
PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAA"
       "ElFTkSuQmCC")
IMAGE = {"role": "user",
         "content": [{"type": "text", "text": "colour?"}, {"type": "image_url", "image_url": {"url": PNG}}]}
IGNORED = {"permission"}  # the model list's permission records: nothing reads them


def shape(value):
    """The structure of a JSON value: keys and types, lists by their elements."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items() if key not in IGNORED}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__


def chat(mode: str, **body):
    return {"model": MODEL_PATH if mode == "path_model" else SERVED_NAME, **body}


# recorded case -> (stand-in mode, method, path, request body); errors also compare the message
CASES = {
    "models": ("small_context", "GET", "/v1/models", None),
    "models_without_served_model_name": ("path_model", "GET", "/v1/models", None),
    "chat_thinking": ("ok", "POST", "/v1/chat/completions",
                      chat("ok", messages=[SUM], max_tokens=100, chat_template_kwargs={"thinking": True})),
    "chat_instant": ("ok", "POST", "/v1/chat/completions",
                     chat("ok", messages=[SUM], max_tokens=100, chat_template_kwargs={"thinking": False})),
    "chat_tool_call": ("ok", "POST", "/v1/chat/completions",
                       chat("ok", messages=[LETTER], tools=[TOOL], max_tokens=100)),
    "max_tokens_above_context": ("small_context", "POST", "/v1/chat/completions",
                                 chat("ok", messages=[SUM], max_tokens=4096)),
    "wrong_model": ("ok", "POST", "/v1/chat/completions", {"model": "kimi", "messages": [SUM], "max_tokens": 10}),
    "image_on_text_only_model": ("text_only", "POST", "/v1/chat/completions",
                                 chat("ok", messages=[IMAGE], max_tokens=10)),
    "thinking_without_reasoning_parser": ("no_parsers", "POST", "/v1/chat/completions", chat(
        "no_parsers", messages=[SUM], max_tokens=100, chat_template_kwargs={"thinking": True})),
    "tools_without_tool_parser": ("no_parsers", "POST", "/v1/chat/completions",
                                  chat("no_parsers", messages=[LETTER], tools=[TOOL], max_tokens=100)),
}


def test_every_recorded_answer_is_compared():
    assert set(RECORDED) == {*CASES, "health", "chat_stream"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_answers_have_the_recorded_shape(standin, case):
    mode, method, path, body = CASES[case]
    answer = httpx.request(method, standin(mode).url + path, json=body, timeout=5)
    recorded = RECORDED[case]
    assert answer.status_code == recorded["status"]
    assert shape(answer.json()) == shape(recorded["body"])
    if "error" in recorded["body"]:
        assert answer.json() == recorded["body"]


def test_health_is_200_with_an_empty_body(standin):
    answer = httpx.get(standin("ok").url + "/health", timeout=5)
    assert (answer.status_code, answer.text) == (RECORDED["health"]["status"], RECORDED["health"]["body"])


def stream_shapes(url: str) -> list:
    """The shapes of the events of the recorded streaming request; the stream must end in [DONE]."""
    body = chat("ok", messages=[SUM], max_tokens=100, stream=True, stream_options={"include_usage": True})
    answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    lines = [line[len("data: "):] for line in answer.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [shape(json.loads(line)) for line in lines[:-1]]


def test_stream_events_have_the_recorded_shapes(standin):
    assert stream_shapes(standin("ok").url) == [shape(e) for e in RECORDED["chat_stream"]["events"]]
