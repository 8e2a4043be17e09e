"""Tiny models for a real vLLM server on a CPU, built in seconds, never downloaded.

Run with the vLLM venv's Python (it has torch, tokenizers, transformers, safetensors):
    python tests/verify/tiny_models.py OUT_DIR   ->  OUT_DIR/scripted, OUT_DIR/random, OUT_DIR/kimi

scripted and random are Llama-architecture (float32); kimi is Kimi-K2's architecture. All three
share a byte-level BPE tokenizer trained here, with Kimi-K2's markup tokens (<think>,
</think>, <|tool_calls_section_begin|> ...) as added tokens, so vLLM 0.32 accepts
`--reasoning-parser kimi_k2 --tool-call-parser kimi_k2`, and a chat template in Kimi's shape
(<|im_user|>user<|im_middle|>...<|im_end|>). head_dim is 32 (16 crashes vLLM's CPU attention).

scripted: hand-set weights that emit exact sequences. The chat template ends the prompt with one
"route" token picked from the conversation (the question, thinking on or off, tools offered, a
tool result); the model continues with that route's chain. One layer does it: attention copies
the route's identity to every later position (a key only route tokens carry, on RoPE's slowest
pair, so the score does not depend on distance); the MLP has one unit per (current token, route)
that writes the next token's logit. Thinking on: `<think>reasoning</think>` then the answer; a
tool question: one Kimi-format tool call; a tool result: the final answer.

random: random weights (gibberish), except that </think> is made likely (about 1 token in 25),
so that a thinking answer is split at a random place, the case that fooled the old check.

kimi: `DeepseekV3ForCausalLM`, the architecture of Kimi-K2 (MLA attention; MoE with sigmoid
scores and noaux_tc routing, one shared expert, the first layer dense), with random bfloat16
weights (fixed seed) made by transformers from a config: gibberish, about 2 MB. It is for shapes
that need a MoE or MLA model (expert parallelism, DP attention). Only the latent head is
full-size: vLLM's CPU MLA backends (CPU_MLA, AMX_MLA) accept only kv_lora_rank 512 +
qk_rope_head_dim 64, and AMX_MLA only bfloat16. model_type is deepseek_v3 (Kimi's own, kimi_k2,
needs remote code), so `--trust-remote-code` is accepted but not needed. vLLM's logits agree
with transformers' to bf16 precision; being random, the model has near-ties (bf16 logits, about
one greedy step in ten has a top-2 gap under 0.05), so two shapes (TP 1 vs DEP/TEP, whose sums
round differently) agree token for token only up to the first near-tie.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

THINK = ("<think>", "</think>")
TOOL_MARKUP = (
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>",
)
ROLES = ("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>")
EOS = "<|im_end|>"

# What the scripted model says. Each phrase is one token (an added token), so no chain repeats one.
SUM_REASONING = "The user asks for 17 + 25. 17 + 25 = 42."
LETTER_REASONING = "I should count the letters with the tool."
CMP_REASONING = "I should compare the numbers with the tool."
RESULT_REASONING = "The tool has answered."
LETTER_CALL = ("functions.count_letter_in_string:0", '{"a": "strawberry", "b": "r"}')
CMP_CALL = ("functions.compare:0", '{"a": 9.11, "b": 9.9}')
LETTER_ANSWER = "There are 3 r's in strawberry."
CMP_ANSWER = "9.9 is larger than 9.11."
UNKNOWN = "I cannot answer that."


def _tool_call(header: str, arguments: str) -> list[str]:
    return ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", header, "<|tool_call_argument_begin|>",
            arguments, "<|tool_call_end|>", "<|tool_calls_section_end|>"]


def _think(reasoning: str) -> list[str]:
    return ["<think>", reasoning, "</think>"]


# route token -> the tokens the model emits after it (EOS added)
CHAINS = {
    "<|route_sum|>": ["42"],
    "<|route_sum_think|>": _think(SUM_REASONING) + ["42"],
    "<|route_letter|>": _tool_call(*LETTER_CALL),
    "<|route_letter_think|>": _think(LETTER_REASONING) + _tool_call(*LETTER_CALL),
    "<|route_cmp|>": _tool_call(*CMP_CALL),
    "<|route_cmp_think|>": _think(CMP_REASONING) + _tool_call(*CMP_CALL),
    "<|route_letter_done|>": [LETTER_ANSWER],
    "<|route_letter_done_think|>": _think(RESULT_REASONING) + [LETTER_ANSWER],
    "<|route_cmp_done|>": [CMP_ANSWER],
    "<|route_cmp_done_think|>": _think(RESULT_REASONING) + [CMP_ANSWER],
    "<|route_unknown|>": [UNKNOWN],
    "<|route_unknown_think|>": _think(RESULT_REASONING) + [UNKNOWN],
}
PHRASES = sorted({t for chain in CHAINS.values() for t in chain} - set(THINK) - set(TOOL_MARKUP))

# Kimi's message format; the last lines pick the route from the conversation.
CHAT_TEMPLATE = """\
{%- macro text(content) -%}
{%- if content is string -%}{{ content }}{%- elif content -%}
{%- for part in content if part.type == 'text' -%}{{ part.text }}{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- for m in messages -%}
{%- set role = m.role if m.role in ('system', 'user', 'assistant') else 'system' -%}
<|im_{{ role }}|>{{ m.role }}<|im_middle|>{{ text(m.content) }}
{%- for call in m.tool_calls or [] -%}
<|tool_calls_section_begin|><|tool_call_begin|>{{ call.id }}<|tool_call_argument_begin|>\
{{ call.function.arguments }}<|tool_call_end|><|tool_calls_section_end|>
{%- endfor -%}<|im_end|>
{%- endfor -%}
{%- if add_generation_prompt -%}
{%- set last = text(messages[-1].content) -%}
{%- set suffix = '' if thinking is defined and not thinking else '_think' -%}
{%- if messages[-1].role == 'tool' and 'appears 3 times' in last -%}{%- set route = 'letter_done' -%}
{%- elif messages[-1].role == 'tool' and '9.9 is greater than 9.11' in last -%}{%- set route = 'cmp_done' -%}
{%- elif tools and 'strawberry' in last -%}{%- set route = 'letter' -%}
{%- elif tools and '9.11' in last -%}{%- set route = 'cmp' -%}
{%- elif messages[-1].role == 'user' and '17 + 25' in last -%}{%- set route = 'sum' -%}
{%- else -%}{%- set route = 'unknown' -%}{%- endif -%}
<|im_assistant|>assistant<|im_middle|><|route_{{ route }}{{ suffix }}|>
{%- endif -%}"""

CORPUS = [
    "What is 17 + 25? Reply with the number only.",
    "How many r's are in the word strawberry? Which is larger, 9.11 or 9.9?",
    "Compute the sum of two numbers. Compute the product of two numbers. A number. The letter.",
    "Compare two numbers and say which one is greater. Count how many times a letter appears.",
    "The quick brown fox jumps over the lazy dog. What colour is this image? Answer in one word.",
    '{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}',
] * 20

HEAD_DIM = 32
MAX_POSITIONS = 4096


def build_tokenizer(out: Path) -> object:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    # Markup and phrases are plain (non-special) added tokens: they survive detokenisation.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in (*THINK, *TOOL_MARKUP, *PHRASES)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (*ROLES, EOS, *CHAINS)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def _config(vocab: int, hidden: int, intermediate: int, eos_id: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": hidden, "intermediate_size": intermediate, "num_hidden_layers": 1,
        "num_attention_heads": hidden // HEAD_DIM, "num_key_value_heads": hidden // HEAD_DIM,
        "head_dim": HEAD_DIM, "hidden_act": "silu", "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32",
        "bos_token_id": eos_id, "eos_token_id": eos_id,
    }


def _save(out: Path, config: dict, weights: dict) -> None:
    from safetensors.torch import save_file

    (out / "config.json").write_text(json.dumps(config, indent=1))
    eos = config["eos_token_id"]
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "bos_token_id": eos}))
    save_file({name: t.contiguous() for name, t in weights.items()}, str(out / "model.safetensors"))


def _layer_names(prefix: str = "model.layers.0.") -> dict:
    return {k: prefix + v for k, v in {
        "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
        "o": "self_attn.o_proj.weight", "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
        "down": "mlp.down_proj.weight", "ln1": "input_layernorm.weight", "ln2": "post_attention_layernorm.weight",
    }.items()}


def build_scripted(out: Path, tokenizer) -> None:
    import torch

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in {*CHAINS, *(x for c in CHAINS.values() for x in c), EOS}}
    assert all(isinstance(i, int) and i >= 0 for i in ids.values()), ids
    routes = list(CHAINS)
    emitted = sorted({t for c in CHAINS.values() for t in c} | {EOS})
    current = sorted(set(routes) | set(emitted))
    transitions = []  # (current token, route, next token)
    for route, chain in CHAINS.items():
        seq = [route, *chain, EOS]
        assert len(set(seq)) == len(seq), f"a token repeats in the chain of {route}"
        transitions += [(a, route, b) for a, b in zip(seq, seq[1:])]
    C, F = 0, 1  # constant dimension; the key only route tokens carry
    T = {t: 2 + i for i, t in enumerate(current)}  # "the current token is t"
    R = {r: 2 + len(T) + i for i, r in enumerate(routes)}  # "the route is r" (written by attention)
    N = {t: 2 + len(T) + len(R) + i for i, t in enumerate(emitted)}  # "the next token is t"
    hidden = -(-(2 + len(T) + len(R) + len(N)) // HEAD_DIM) * HEAD_DIM
    inter = -(-len(transitions) // 32) * 32
    vocab = len(tokenizer)
    assert len(routes) <= HEAD_DIM
    w = {
        "model.embed_tokens.weight": torch.zeros(vocab, hidden),
        "lm_head.weight": torch.zeros(vocab, hidden),
        "model.norm.weight": torch.ones(hidden),
    }
    n = _layer_names()
    w.update({n["q"]: torch.zeros(hidden, hidden), n["k"]: torch.zeros(hidden, hidden),
              n["v"]: torch.zeros(hidden, hidden), n["o"]: torch.zeros(hidden, hidden),
              n["gate"]: torch.zeros(inter, hidden), n["up"]: torch.zeros(inter, hidden),
              n["down"]: torch.zeros(hidden, inter), n["ln1"]: torch.ones(hidden), n["ln2"]: torch.ones(hidden)})
    emb = w["model.embed_tokens.weight"]
    emb[:, C] = 1.0
    for t, dim in T.items():
        emb[ids[t], dim] = 1.0
    for r in routes:
        emb[ids[r], F] = 1.0
    # Attention, head 0: query = constant, key = route flag, both on dimension 15, which RoPE pairs
    # with 31 at its slowest frequency (rope_theta 1e6: under 0.01 rad over 4096 positions).
    slow = HEAD_DIM // 2 - 1
    w[n["q"]][slow, C] = 4.0
    w[n["k"]][slow, F] = 4.0
    route_rms = (3 / hidden) ** 0.5  # a route token's embedding has three ones
    for j, r in enumerate(routes):
        w[n["v"]][j, T[r]] = route_rms  # value = which route this is, at unit size after the norm
        w[n["o"]][R[r], j] = 1.0
    # MLP: unit i fires only when the current token and the route both match (a bias via C).
    for i, (a, route, b) in enumerate(transitions):
        w[n["gate"]][i, T[a]] = 4.0
        w[n["gate"]][i, R[route]] = 4.0
        w[n["gate"]][i, C] = -6.0
        w[n["up"]][i, C] = 1.0
        w[n["down"]][N[b], i] = 1.0
    for t, dim in N.items():
        w["lm_head.weight"][ids[t], dim] = 10.0
    _save(out, _config(vocab, hidden, inter, ids[EOS]), w)


def build_random(out: Path, tokenizer, seed: int = 0, layers: int = 1, hidden: int = 2 * HEAD_DIM) -> None:
    import torch

    vocab, inter = len(tokenizer), 2 * hidden
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen) * 0.02

    w = {"model.embed_tokens.weight": rand(vocab, hidden), "lm_head.weight": rand(vocab, hidden),
         "model.norm.weight": torch.ones(hidden)}
    for layer in range(layers):
        n = _layer_names(f"model.layers.{layer}.")
        w.update({
            n["q"]: rand(hidden, hidden), n["k"]: rand(hidden, hidden), n["v"]: rand(hidden, hidden),
            n["o"]: rand(hidden, hidden), n["gate"]: rand(inter, hidden), n["up"]: rand(inter, hidden),
            n["down"]: rand(hidden, inter), n["ln1"]: torch.ones(hidden), n["ln2"]: torch.ones(hidden),
        })
    # A constant dimension that dominates after the final norm, read only by </think>'s logit.
    w["model.embed_tokens.weight"][:, 0] = 1.0
    w["lm_head.weight"][tokenizer.convert_tokens_to_ids("</think>"), 0] = 0.4
    eos = tokenizer.convert_tokens_to_ids(EOS)
    config = _config(vocab, hidden, inter, eos)
    config["num_hidden_layers"] = layers
    _save(out, config, w)


def build_prefill_heavy(out: Path, tokenizer, seed: int = 0) -> None:
    """`random` made deeper and wider (2 layers of 256, ~1.5 M parameters): a prompt's prefill then costs
    ~10x its cached answer on one core, as a long prompt's does on a large model (benchmarks/fleet.py's
    --model prefill-heavy). Built only when asked (`tiny_models.py OUT prefill-heavy`)."""
    build_random(out, tokenizer, seed, layers=2, hidden=8 * HEAD_DIM)


# Kimi-K2's config.json, shrunk: routing, MLA latent sizes and rope as in the real one.
KIMI_CONFIG = {
    "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 512,
    "qk_nope_head_dim": 32, "qk_rope_head_dim": 64, "v_head_dim": 32,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
    "moe_layer_freq": 1, "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
    "seq_aux": True, "norm_topk_prob": True, "routed_scaling_factor": 2.827, "num_nextn_predict_layers": 0,
    "hidden_act": "silu", "max_position_embeddings": 32 * MAX_POSITIONS, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    # Kimi-K2's YaRN. It also matters on vLLM 0.32's CPU backend: with plain rope ("default") vLLM
    # runs its CPU rotary kernel, which rotates MLA's 3-D query view wrongly (tokens then differ
    # from transformers', and between TP 1 and TP 2); YaRN takes the PyTorch path, which is right.
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0,
                        "original_max_position_embeddings": MAX_POSITIONS, "beta_fast": 1.0,
                        "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
    # 10x transformers' default: at 0.02 greedy decoding repeats one token whatever the experts do;
    # at 0.2 the prompt and the routed experts decide the tokens, so shapes can be compared.
    "initializer_range": 0.2,
}


def build_kimi(out: Path, tokenizer, seed: int = 0) -> None:
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    eos = tokenizer.convert_tokens_to_ids(EOS)
    config = DeepseekV3Config(vocab_size=len(tokenizer), bos_token_id=eos, eos_token_id=eos, **KIMI_CONFIG)
    config.architectures = ["DeepseekV3ForCausalLM"]
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():  # Kimi's router has a non-zero score correction (transformers starts it at 0)
        for layer in model.model.layers[KIMI_CONFIG["first_k_dense_replace"]:]:
            layer.mlp.gate.e_score_correction_bias.copy_(torch.randn(KIMI_CONFIG["n_routed_experts"]) * 0.01)
    model.save_pretrained(out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "bos_token_id": eos}))


def main(out: str, *also: str) -> None:
    root = Path(out)
    builds = {"scripted": build_scripted, "random": build_random, "kimi": build_kimi}
    asked = {"prefill-heavy": build_prefill_heavy}
    for name, build in (*builds.items(), *((a, asked[a]) for a in also)):
        target = root / name
        target.mkdir(parents=True, exist_ok=True)
        build(target, build_tokenizer(target))
    print(root)


if __name__ == "__main__":
    main(*sys.argv[1:])
