"""The stream front (docs/fleet.md "Streams through faults"): the process a fleet's clients reach, in
front of its vllm-router, that sees every streamed token.

- `stream`: pure: which requests can be continued and why not, the SSE events, the continuation
  request, the chunks rewritten so a continued stream is one stream (one id, every token once);
- `server`: the HTTP server (aiohttp): passes every other request through to the router untouched,
  and a stream whose engine dies mid-answer continues on a survivor through the router, or ends
  with an explicit error event that OpenAI's SDKs raise, never a clean end without `finish_reason`.

It imports only core's base room (bounds, errors): the front runs in the router's container and
composes no launch.
"""
