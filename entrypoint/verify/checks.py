"""The checks of `kimi-serve verify`. Each asks a question whose answer it knows and requires that
answer; a hint names a cause only when the answer shows it (reasoning inline in content, a tool
call returned as text, vLLM's own "no tool parser" error), otherwise it lists the possible causes.
Requests are sized to the server: max_tokens never exceeds what its max_model_len allows.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from entrypoint.verify.client import CheckFailed, Reply, Server, ServerError, excerpt
from entrypoint.verify.questions import (
    COMPARE_QUESTION, IMAGE_QUESTION, LETTER_QUESTION, SUM_ANSWER, SUM_QUESTION, TOOLS, is_number_only,
    looks_like_path, names_red, run_tool_call, says_nine_point_nine, says_three, solid_png,
)

THINKING_MAX_TOKENS = 4096  # thinking spends most of the budget before the answer
ANSWER_MAX_TOKENS = 256
PROMPT_ALLOWANCE = 1024  # tokens kept for the prompt (the tool schemas are the longest, ~500)
MAX_TOOL_ROUNDS = 3

WRONG_ANSWER_CAUSES = ("possible causes: wrong or damaged weights, a chat template other than the model's, "
                       "a quantization or kernel fault")
# a call the model made but not as offered (an unknown function, unusable arguments, no end): the model's
TOOL_CALL_CAUSES = ("possible causes: a model that does not use the tools as offered, a chat template other than "
                    "the model's, wrong or damaged weights")


@dataclass(frozen=True)
class ChatFacts:
    """What the recipe says about talking to its model (its `chat`, `tasks` and its features' args):
    the parser flags a hint names, the chat_template_kwargs that switch thinking on and off (None:
    the template has no switch), whether it reads images, and the markup of its tool calls (a call
    left in content shows the wrong parser ran). Only `of(recipe)` makes one: no model or parser is
    assumed here."""

    title: str
    reasoning_args: str
    tool_args: str
    thinking_on: Optional[dict]
    thinking_off: Optional[dict]
    images: bool  # the model reads images (the recipe's tasks name `multimodal`)
    tool_call_markup: tuple  # every one of these in content = a whole tool call left unparsed
    idle_timeout_s: Optional[int] = None  # what the rendered proxies wait between chunks (serving.yaml streams)

    @classmethod
    def of(cls, recipe, idle_timeout_s: Optional[int] = None) -> "ChatFacts":
        """The facts of a recipe (a record of recipes/models/<slug>.yaml); `idle_timeout_s`: the
        proxies' wait between two chunks (recipes/serving.yaml streams)."""
        def args(fid: str) -> str:
            return " ".join(recipe.features[fid].args) if fid in recipe.features else f"(the recipe has no {fid})"

        return cls(title=recipe.title, reasoning_args=args("reasoning"), tool_args=args("tool_calling"),
                   thinking_on=dict(recipe.chat.thinking_on) if recipe.chat.thinking_on else None,
                   thinking_off=dict(recipe.chat.thinking_off) if recipe.chat.thinking_off else None,
                   images="multimodal" in recipe.tasks, tool_call_markup=tuple(recipe.chat.tool_call_markup),
                   idle_timeout_s=idle_timeout_s)


def skip_reason(check: str, features: frozenset[str], chat: ChatFacts) -> str | None:
    if check == "chat_instant" and "reasoning" in features and chat.thinking_off is None:
        return f"{chat.title}'s chat template has no switch to turn thinking off"
    if check == "chat_thinking" and "reasoning" not in features:
        return "the reasoning feature is off (no reasoning parser)"
    if check.startswith("tools_") and "tool_calling" not in features:
        return "the tool_calling feature is off (no tool-call parser)"
    if check == "image" and not chat.images:
        return f"{chat.title} takes text only (the recipe's tasks)"
    if check == "image" and "text_only" in features:
        return "text_only is on (no vision encoder)"
    return None


def _user(content: object) -> dict:
    return {"role": "user", "content": content}


# --- evidence: what an answer shows about the server ---------------------------------------------


def reasoning_inline(reply: Reply) -> bool:
    """The model's </think> is in content and there is no reasoning field: nothing split it."""
    return "</think>" in reply.content and not reply.reasoning


def tool_call_as_text(reply: Reply, markup: tuple) -> bool:
    """A whole tool-call section of the model's own markup in content: a tool-call parser other
    than the recipe's ran."""
    return bool(markup) and all(mark in reply.content for mark in markup)


def no_tool_parser(error: ServerError) -> bool:
    """vLLM's 400 for tools when it was started without a tool-call parser."""
    return error.status == 400 and ("--tool-call-parser" in error.message or "auto-tool-choice" in error.message)


def wrong_answer(what: str, reply: Reply, expected: str) -> CheckFailed:
    return CheckFailed(f"{what} {excerpt(reply.content)!r} does not give {expected} "
                       f"(finish_reason {reply.finish_reason!r}); {WRONG_ANSWER_CAUSES}")


class Verifier:
    def __init__(self, server: Server, model: str | None, expected_model: str | None, features: frozenset[str],
                 chat: ChatFacts):
        self.server = server
        self.model = model
        self.expected_model = expected_model
        self.features = features
        self.chat = chat
        self.max_model_len: int | None = None  # from /v1/models

    def checks(self) -> list[tuple[str, Callable[[], str]]]:
        return [
            ("health", self.health),
            ("models", self.models),
            ("chat_thinking", self.chat_thinking),
            ("chat_instant", self.chat_instant),
            ("tools_count_letter", self.tools_count_letter),
            ("tools_compare", self.tools_compare),
            ("image", self.image),
            ("streaming", self.streaming),
        ]

    def budget(self, wanted: int) -> int:
        """max_tokens to ask for: `wanted`, but never more than the server's context leaves."""
        if self.max_model_len is None:
            return wanted
        return max(1, min(wanted, max(self.max_model_len // 2, self.max_model_len - PROMPT_ALLOWANCE)))

    # --- the server ------------------------------------------------------------------------------

    def health(self) -> str:
        self.server.get("/health")
        return "/health answered 200"

    def models(self) -> str:
        listing = self.server.get_json("/v1/models")
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
            raise CheckFailed(f"/v1/models has no list of models with ids: {excerpt(listing)}")
        ids = [m["id"] for m in data]
        if self.model is None:  # read the name to send, don't assume it
            self.model = ids[0] if len(ids) == 1 else (self.expected_model if self.expected_model in ids else None)
        entry = next((m for m in data if m["id"] == self.model), data[0] if len(data) == 1 else None)
        length = entry.get("max_model_len") if entry else None
        if isinstance(length, int) and not isinstance(length, bool) and length > 0:
            self.max_model_len = length
        if len(ids) != 1:
            raise CheckFailed(f"/v1/models lists {len(ids)} models ({', '.join(ids) or 'none'}), not exactly one")
        served = ids[0]
        if looks_like_path(served):
            raise CheckFailed(f"the model id {served!r} is a path: {self._path_hint()}")
        if self.expected_model and served != self.expected_model:
            raise CheckFailed(
                f"the server serves {served!r} but the configuration expects {self.expected_model!r} "
                "(vLLM's --served-model-name)"
            )
        if self.model != served:
            raise CheckFailed(f"the model name to send, {self.model!r}, is not the one served ({served!r})")
        context = f", max_model_len {self.max_model_len}" if self.max_model_len else ""
        return f"one model: {served}{context}"

    def _path_hint(self) -> str:
        hint = ("the server was started without --served-model-name, so clients must send a filesystem path "
                "as the model name; restart vLLM with --served-model-name {name} (KIMI_SERVED_MODEL_NAME)")
        expected = self.expected_model
        if expected and not looks_like_path(expected):
            return hint.format(name=expected)
        if expected:
            return hint.format(name="NAME") + f", a name that is not a path (the expected {expected!r} is one too)"
        return hint.format(name="NAME")

    # --- chat ------------------------------------------------------------------------------------

    def chat_thinking(self) -> str:
        max_tokens = self.budget(THINKING_MAX_TOKENS)
        reply = self._chat([_user(SUM_QUESTION)], thinking=True, max_tokens=max_tokens)
        if reasoning_inline(reply):
            raise CheckFailed(f"the reasoning came back inside content ({excerpt(reply.content)!r}) and no reasoning "
                              f"field: the server has no reasoning parser; start vLLM with {self.chat.reasoning_args}")
        if not reply.reasoning:
            causes = ("possible causes: no reasoning parser on the server and a model that did not think, or a chat "
                      'template that ignores "thinking": true')
            raise CheckFailed(f"no reasoning (the answer was {excerpt(reply.content)!r}); {causes}")
        if not reply.content:
            if reply.finish_reason == "length":
                context = f", the server's max_model_len is {self.max_model_len}" if self.max_model_len else ""
                raise CheckFailed(f"no answer after {len(reply.reasoning)} chars of reasoning: max_tokens={max_tokens} "
                                  f"ran out while thinking{context}")
            raise CheckFailed(f"no answer after {len(reply.reasoning)} chars of reasoning (finish_reason "
                              f"{reply.finish_reason!r}): the model never ended its reasoning; {WRONG_ANSWER_CAUSES}")
        if not is_number_only(reply.content, SUM_ANSWER):
            raise wrong_answer("the answer after the reasoning", reply, f"{SUM_ANSWER} (asked: {SUM_QUESTION!r})")
        return f"answer {SUM_ANSWER!r} after {len(reply.reasoning)} chars of reasoning"

    def chat_instant(self) -> str:
        reply = self._chat([_user(SUM_QUESTION)], thinking=False, max_tokens=self.budget(ANSWER_MAX_TOKENS))
        if reply.reasoning or "</think>" in reply.content:
            shown = reply.reasoning or reply.content
            switch = json.dumps(self.chat.thinking_off or {})
            raise CheckFailed(f"instant mode (chat_template_kwargs {switch}) still reasoned: {excerpt(shown)!r}; "
                              f"possible causes: a chat template that ignores {switch}, a model that is not "
                              f"{self.chat.title}")
        if not is_number_only(reply.content, SUM_ANSWER):
            raise wrong_answer("the answer", reply, f"{SUM_ANSWER} (asked: {SUM_QUESTION!r})")
        return f"answer {SUM_ANSWER!r}, no reasoning"

    def tools_count_letter(self) -> str:
        return self.tool_round_trip(LETTER_QUESTION, "count_letter_in_string", says_three, "3")

    def tools_compare(self) -> str:
        return self.tool_round_trip(COMPARE_QUESTION, "compare", says_nine_point_nine, "9.9")

    def tool_round_trip(self, question: str, tool: str, is_right: Callable[[str], bool], expected: str) -> str:
        """Offer the tools, run the calls locally, send the results back, judge the final answer."""
        messages = [_user(question)]
        reply = self._tool_chat(messages)
        if not reply.tool_calls:
            if tool_call_as_text(reply, self.chat.tool_call_markup):
                raise CheckFailed(f"the tool call came back as text in content ({excerpt(reply.content)!r}): the "
                                  f"server's tool-call parser is not the {self.chat.title} recipe's; start vLLM "
                                  f"with {self.chat.tool_args}")
            raise CheckFailed(f"no tool call; the model answered {excerpt(reply.content)!r} (finish_reason "
                              f"{reply.finish_reason!r}); possible causes: a model that does not use tools, a chat "
                              "template that drops them, wrong or damaged weights")
        calls = []
        for _round in range(MAX_TOOL_ROUNDS):
            if not reply.tool_calls:
                break
            if reply.finish_reason != "tool_calls":
                raise CheckFailed(f"tool calls came with finish_reason {reply.finish_reason!r}, not 'tool_calls'; "
                                  f"{TOOL_CALL_CAUSES}")
            messages.append({"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls})
            for call in reply.tool_calls:
                try:
                    name, result = run_tool_call(call)
                except CheckFailed as error:
                    raise CheckFailed(f"{error}; {TOOL_CALL_CAUSES}") from None
                calls.append(name)
                messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": result})
            reply = self._tool_chat(messages)
        if reply.tool_calls:
            raise CheckFailed(f"still calling tools after {MAX_TOOL_ROUNDS} rounds: {', '.join(calls)}; {TOOL_CALL_CAUSES}")
        if tool not in calls:
            raise CheckFailed(f"the model called {', '.join(calls)}, not {tool}, for {question!r}; {TOOL_CALL_CAUSES}")
        if not is_right(reply.content):
            raise wrong_answer("the final answer", reply, expected)
        return f"{' + '.join(calls)} -> {excerpt(reply.content, 60)!r}"

    def image(self) -> str:
        png = base64.b64encode(solid_png(64, 64, (220, 30, 30))).decode("ascii")
        content = [
            {"type": "text", "text": IMAGE_QUESTION},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
        ]
        try:
            reply = self._chat([_user(content)], thinking=False, max_tokens=self.budget(ANSWER_MAX_TOKENS))
        except ServerError as error:
            if error.status == 400 and "not a multimodal model" in error.message:
                raise CheckFailed(f"{error}: the served model has no vision encoder; turn the text_only feature on "
                                  "if that is intended (KIMI_FEATURES=+text_only, verify --features)") from None
            raise
        if not names_red(reply.content):
            raise wrong_answer("the answer to a red image", reply, "red")
        return f"answer {excerpt(reply.content, 40)!r}"

    def streaming(self) -> str:
        body = self._body([_user(SUM_QUESTION)], thinking=False, max_tokens=self.budget(ANSWER_MAX_TOKENS))
        body.update(stream=True, stream_options={"include_usage": True})
        chunks, text, finish_reason = 0, "", None
        for event in self.server.stream_chat(body):
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content") or delta.get("reasoning"):
                    chunks += 1
                    text += delta.get("content") or ""
                finish_reason = choice.get("finish_reason") or finish_reason
        if not chunks:
            raise CheckFailed("the stream carried no content chunks")
        if finish_reason is None:
            raise CheckFailed(f"the stream ended after {chunks} chunks without a finish_reason")
        if not is_number_only(text, SUM_ANSWER):
            raise CheckFailed(f"the streamed answer {excerpt(text)!r} does not give {SUM_ANSWER}; "
                              f"{WRONG_ANSWER_CAUSES}")
        gap = getattr(self.server, "last_gap_s", 0.0)
        said = f"content chunks: {chunks}, finish_reason {finish_reason!r}, longest gap between chunks {gap:.1f} s"
        limit = self.chat.idle_timeout_s
        if limit and gap >= limit / 2:  # a proxy that waits `limit` s would soon cut such a stream
            said += (f"; warning: that is near the {limit} s a proxy in front waits between chunks "
                     "(recipes/serving.yaml streams.idle_timeout_s): raise the proxies' idle timeouts")
        return said

    # --- requests --------------------------------------------------------------------------------

    def _body(self, messages: list, *, thinking: bool, max_tokens: int) -> dict:
        body = {"model": self.model, "messages": messages, "max_tokens": max_tokens}
        kwargs = self.chat.thinking_on if thinking else self.chat.thinking_off
        if kwargs:
            body["chat_template_kwargs"] = dict(kwargs)
        return body

    def _chat(self, messages: list, *, thinking: bool, max_tokens: int) -> Reply:
        return Reply.parse(self.server.chat(self._body(messages, thinking=thinking, max_tokens=max_tokens)))

    def _tool_chat(self, messages: list) -> Reply:
        # The article's settings: near-greedy so that the tool choice is deterministic.
        thinking = "reasoning" in self.features
        wanted = THINKING_MAX_TOKENS if thinking else 1024
        body = self._body(messages, thinking=thinking, max_tokens=self.budget(wanted))
        body.update(tools=[tool.schema() for tool in TOOLS.values()], temperature=0.01, top_p=0.95)
        try:
            return Reply.parse(self.server.chat(body))
        except ServerError as error:
            if no_tool_parser(error):
                hint = f"the server has no tool-call parser; start vLLM with {self.chat.tool_args}"
                raise CheckFailed(f"{error}: {hint}") from None
            raise
