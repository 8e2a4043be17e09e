"""What the checks ask and how they judge the answers: each question has one known answer, the
tools run locally (no eval), and the image is a PNG drawn by hand."""

from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import dataclass
from collections.abc import Callable

from entrypoint.verify.client import CheckFailed, excerpt

SUM_QUESTION = "What is 17 + 25? Reply with the number only."
SUM_ANSWER = "42"
LETTER_QUESTION = "How many r's are in the word strawberry?"
COMPARE_QUESTION = "Which is larger, 9.11 or 9.9?"
IMAGE_QUESTION = "What colour is this image? Answer in one word."


def bare(answer: str) -> str:
    """The answer without surrounding space, markdown emphasis, quotes and full stops."""
    return answer.strip().strip("*_`\"' .\n")


def is_number_only(answer: str, number: str) -> bool:
    return bare(answer) == number


def says_three(answer: str) -> bool:
    return re.search(r"\b(3|three)\b", answer, re.IGNORECASE) is not None


def says_nine_point_nine(answer: str) -> bool:
    names_it = re.search(r"(?<![\d.])9\.90*(?!\d)", answer) is not None
    wrong = re.search(r"9\.11\s+is\s+(the\s+)?(larger|greater|bigger)", answer, re.IGNORECASE)
    return names_it and not wrong


def names_red(answer: str) -> bool:
    return re.search(r"\bred\b", answer, re.IGNORECASE) is not None


def looks_like_path(model_id: str) -> bool:
    """A model id that is a filesystem path (vLLM's default without --served-model-name)."""
    return model_id.startswith(("/", "./", "../", "~")) or model_id.count("/") > 1 or "\\" in model_id


def solid_png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A one-colour RGB PNG, written by hand (signature, IHDR, IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    scanline = b"\x00" + bytes(rgb) * width  # filter type 0 per row
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(scanline * height))
        + chunk(b"IEND", b"")
    )


# --- the article's four tools -------------------------------------------------------------------


def _number(value: object) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a number")
    return float(value) if isinstance(value, str) else value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


def _compare(a: float, b: float) -> str:
    if a == b:
        return f"{a} is equal to {b}"
    larger, smaller = (a, b) if a > b else (b, a)
    return f"{larger} is greater than {smaller}"


def _count_letter(a: str, b: str) -> str:
    if len(b) != 1:
        raise ValueError(f"b must be one letter, not {b!r}")
    return f"The letter '{b}' appears {a.lower().count(b.lower())} times in '{a}'."


@dataclass(frozen=True)
class Tool:
    """One function offered to the model: its schema and its local implementation."""

    name: str
    description: str
    params: dict  # argument -> (JSON schema type, description)
    run: Callable[..., object]

    def schema(self) -> dict:
        properties = {arg: {"type": kind, "description": desc} for arg, (kind, desc) in self.params.items()}
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {"type": "object", "properties": properties, "required": list(self.params)},
            },
        }

    def call(self, arguments: str) -> str:
        """Run the function on the model's JSON arguments; CheckFailed if they don't fit."""
        try:
            args = json.loads(arguments)
        except (TypeError, ValueError):
            raise CheckFailed(f"{self.name}: arguments are not valid JSON: {excerpt(arguments)}") from None
        if not isinstance(args, dict) or set(args) != set(self.params):
            raise CheckFailed(f"{self.name}: arguments must be {sorted(self.params)}, got {excerpt(args)}")
        convert = {"number": _number, "string": _text}
        try:
            values = {arg: convert[kind](args[arg]) for arg, (kind, _desc) in self.params.items()}
            return str(self.run(**values))
        except ValueError as error:
            raise CheckFailed(f"{self.name}: unusable arguments {excerpt(args)}: {error}") from None


TOOLS = {
    tool.name: tool
    for tool in (
        Tool("add", "Compute the sum of two numbers",
             {"a": ("number", "A number"), "b": ("number", "A number")}, lambda a, b: a + b),
        Tool("mul", "Compute the product of two numbers",
             {"a": ("number", "A number"), "b": ("number", "A number")}, lambda a, b: a * b),
        Tool("compare", "Compare two numbers and say which one is greater",
             {"a": ("number", "A number"), "b": ("number", "A number")}, _compare),
        Tool("count_letter_in_string", "Count how many times a letter appears in a string",
             {"a": ("string", "The source string"), "b": ("string", "The letter")}, _count_letter),
    )
}


def run_tool_call(call: object) -> tuple[str, str]:
    """Execute one structured tool call locally: (function name, result text)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or function.get("name") not in TOOLS:
        raise CheckFailed(f"the tool call does not name one of the offered functions: {excerpt(call)}")
    return function["name"], TOOLS[function["name"]].call(function.get("arguments"))
