"""What every live shape must do through its front, as a client would: a completion, a chat
completion through the recipe's Kimi parsers (the reasoning parser moves the model's thinking out of
`content`), a request with tools (the Kimi tool-call parser and auto tool choice); then a stop that
drains: every container exits 0 on SIGTERM within the bound."""

from __future__ import annotations

from tests.live.shape import Shape, post

PROMPT = "The capital of France is"
TOOLS = [{"type": "function", "function": {
    "name": "count_letter_in_string", "description": "Count a letter in a string",
    "parameters": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                   "required": ["a", "b"]}}}]


def completion(url: str, model: str, max_tokens: int = 8) -> dict:
    answer = post(url + "/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                                            "temperature": 0, "ignore_eos": True})
    assert answer["object"] == "text_completion", answer
    assert answer["usage"]["completion_tokens"] == max_tokens, answer["usage"]
    return answer


def chat(url: str, model: str, **more) -> dict:
    answer = post(url + "/v1/chat/completions", {"model": model, "messages": [
        {"role": "user", "content": "How many r's are in strawberry?"}], "max_tokens": 12, "temperature": 0,
        "ignore_eos": True, **more})
    assert answer["object"] == "chat.completion", answer
    return answer["choices"][0]


def check_front(shape: Shape) -> None:
    url, model = shape.front.url(), shape.plan.served_model_name
    completion(url, model)
    thought = chat(url, model)["message"]
    # The tiny model never closes its thinking: the reasoning parser (kimi_k2) keeps all of it
    # out of `content`; without the parser it would be the content.
    assert thought.get("reasoning") and not thought.get("content"), thought
    with_tools = chat(url, model, tools=TOOLS, tool_choice="auto")
    assert with_tools["finish_reason"] in ("length", "stop", "tool_calls"), with_tools


def check_ranks_agree(shape: Shape, concurrent: int = 4) -> None:
    """Data-parallel ranks give the same greedy tokens: concurrent requests through the front (which
    spreads them over the ranks), or one through every node that serves HTTP when more than one does."""
    from concurrent.futures import ThreadPoolExecutor

    model = shape.plan.served_model_name
    fronts = [n.url() for n in shape.nodes if n.proc.serves_http]
    urls = fronts if len(fronts) > 1 else [shape.front.url()] * concurrent
    with ThreadPoolExecutor(len(urls)) as pool:
        texts = list(pool.map(lambda url: completion(url, model)["choices"][0]["text"], urls))
    assert len(set(texts)) == 1, dict(zip(urls, texts))


def preflight_named(shape: Shape, *limits: str) -> None:
    """The front's start log names each CPU-backend limit (recipes/hardware.yaml host_backend.limits)
    that KIMI_PREFLIGHT=warn started past."""
    log = shape.front.tail(400)
    assert "host_limits: error" in log and all(limit in log for limit in limits), log[-2000:]


def check_stop(shape: Shape, killed: tuple = ()) -> None:
    """SIGTERM every container still running: each exits 0 (drained) within the bound. `killed`: the
    containers the module's fault test SIGKILLed and left down (their code is -9, and none else's)."""
    import signal
    import time

    t0 = time.monotonic()
    codes = shape.stop()
    shape.stopped, shape.stop_s = codes, time.monotonic() - t0
    assert sorted(codes) == sorted(n.name for n in shape.nodes) and len(killed) < len(codes), codes
    assert {name: code for name, code in codes.items() if code != 0} == {
        name: -signal.SIGKILL for name in killed}, (codes, shape.tails())
