"""A kernel's parameter list as the compiler sees it: after preprocessing, typedefs resolved.

The harness generates the host code from the task file, so every candidate must
take exactly the reference's arguments. Reading the raw text for that is
fooled by an ``#if 0`` decoy, a kernel in a string or comment, or a typedef
(``DATA_TYPE *`` is ``float *``). Here the source is preprocessed first
(:mod:`kernelcast.tools.core.preprocess`), comments and literals are blanked, every
definition or declaration of the entry point is found (they must agree) and
each parameter is reduced to (address space, element type, pointer or value).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelcast.tools.core import language as lang
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.language import OPENCL
from kernelcast.tools.core.preprocess import PreprocessError, blank_comments_and_literals, preprocess

ADDRESS_SPACES = {"__global": "global", "global": "global", "__local": "local", "local": "local",
                  "__constant": "constant", "constant": "constant", "__private": "private", "private": "private",
                  "__generic": "generic", "generic": "generic"}
QUALIFIERS = {"const", "restrict", "__restrict", "__restrict__", "volatile", "__read_only", "read_only",
              "__write_only", "write_only", "__read_write", "read_write", "register", "__grid_constant__",
              "struct", "enum", "union"}
_MULTIWORD = {  # canonical OpenCL spelling of C's multi-word scalar types
    ("unsigned",): "uint", ("signed",): "int", ("unsigned", "int"): "uint", ("signed", "int"): "int",
    ("unsigned", "char"): "uchar", ("signed", "char"): "char", ("unsigned", "short"): "ushort",
    ("short", "int"): "short", ("unsigned", "short", "int"): "ushort", ("signed", "short"): "short",
    ("unsigned", "long"): "ulong", ("long", "int"): "long", ("unsigned", "long", "int"): "ulong",
    ("long", "long"): "long", ("unsigned", "long", "long"): "ulong", ("signed", "long"): "long",
    ("long", "long", "int"): "long", ("unsigned", "long", "long", "int"): "ulong",
}
_ALIASES = {"int32_t": "int", "uint32_t": "uint", "int64_t": "long", "uint64_t": "ulong", "int8_t": "char",
            "uint8_t": "uchar", "int16_t": "short", "uint16_t": "ushort", "size_t": "ulong", "__half": "half",
            "unsigned_int": "uint"}
_VECTOR = re.compile(r"^([a-z_]+?)(2|3|4|8|16)$")
_SCALARS = {"char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "float", "double", "half", "bool"}
_TOKEN = re.compile(r"[A-Za-z_]\w*|\*|\[|\]|&|\S")
_TYPEDEF = re.compile(r"\btypedef\b([^;{}]*?)\b([A-Za-z_]\w*)\s*;")
_ATTRIBUTE = re.compile(r"\b(?:__attribute__|__launch_bounds__|__declspec|alignas|_Alignas)\s*\(")


class KernelSignatureError(InputError, ValueError):
    """The entry point is missing, defined inconsistently, or its source cannot be read."""


@dataclass(frozen=True)
class KernelParam:
    """One parameter: its name (may be empty in a declaration), address space, element type, kind."""

    name: str
    space: str
    base: str
    pointer: bool
    width: int = 1  # vector width of the element type (float4: 4)

    def abi(self) -> tuple[str, str, str]:
        """What the host relies on: (address space, base type, pointer|value); pointer widths do not count."""
        base = self.base if self.pointer or self.width == 1 else f"{self.base}{self.width}"
        return self.space, base, "pointer" if self.pointer else "value"


def kernel_params(source: str, entry: str, language: str = OPENCL.name,
                  build_options: tuple[str, ...] = ()) -> list[KernelParam]:
    """The entry point's parameters after preprocessing with ``build_options``' macros."""
    try:
        code = preprocess(source, language, tuple(build_options))
    except PreprocessError as exc:
        raise KernelSignatureError(str(exc)) from None
    code = blank_comments_and_literals(code)
    typedefs = _typedefs(code)
    lists = _parameter_lists(code, entry, language)
    if not lists:
        raise KernelSignatureError(f"kernel entry point {entry!r} not found")
    parsed = [_parse_list(text, typedefs) for text in lists]
    first = [p.abi() for p in parsed[0]]
    for other in parsed[1:]:
        if [p.abi() for p in other] != first:
            raise KernelSignatureError(f"kernel {entry!r} is declared more than once with different parameters")
    return parsed[0]


def _parameter_lists(code: str, entry: str, language: str) -> list[str]:
    """The text inside the parentheses of every kernel declaration or definition named ``entry``."""
    out = []
    kernel_words = lang.language(language).kernel_words
    for match in re.finditer(rf"\b{re.escape(entry)}\s*\(", code):
        prefix_start = max(code.rfind(";", 0, match.start()), code.rfind("}", 0, match.start()),
                           code.rfind("{", 0, match.start()))
        prefix = set(re.findall(r"[A-Za-z_]\w*", _strip_attributes(code[prefix_start + 1: match.start()])))
        if not (prefix & kernel_words) or "void" not in prefix:
            continue
        depth, start = 1, match.end()
        for i in range(start, len(code)):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            if depth == 0:
                out.append(code[start:i])
                break
        else:
            raise KernelSignatureError(f"unbalanced parentheses in the parameter list of {entry!r}")
    return out


def _strip_attributes(text: str) -> str:
    """Remove ``__attribute__((...))`` and similar groups (their commas are not parameter separators)."""
    while True:
        match = _ATTRIBUTE.search(text)
        if not match:
            return text
        depth, end = 1, match.end()
        while end < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        text = text[: match.start()] + " " + text[end:]


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _typedefs(code: str) -> dict[str, tuple[str, ...]]:
    """typedef name -> the words of its type (``*`` included), from the preprocessed code."""
    return {m.group(2): tuple(_TOKEN.findall(_strip_attributes(m.group(1)))) for m in _TYPEDEF.finditer(code)}


def _parse_list(text: str, typedefs: dict[str, tuple[str, ...]]) -> list[KernelParam]:
    text = _strip_attributes(text).strip()
    if not text or text == "void":
        return []
    return [_parse_param(raw, typedefs) for raw in _split_top_level(text)]


def _parse_param(raw: str, typedefs: dict[str, tuple[str, ...]]) -> KernelParam:
    tokens = _TOKEN.findall(raw)
    pointer = "*" in tokens or "[" in tokens
    words = [t for t in tokens if re.match(r"[A-Za-z_]", t)]
    name = ""
    if len(words) >= 2 and not _is_type_word(words[-1], typedefs):
        name = words.pop()
    space = next((ADDRESS_SPACES[w] for w in words if w in ADDRESS_SPACES), "")
    type_words = [w for w in words if w not in ADDRESS_SPACES and w not in QUALIFIERS]
    base, via_pointer, via_space = _resolve(tuple(type_words), typedefs, 0)
    pointer = pointer or via_pointer
    space = space or via_space or ("generic" if pointer else "private")
    width = 1
    vec = _VECTOR.match(base)
    if vec and vec.group(1) in _SCALARS:
        base, width = vec.group(1), int(vec.group(2))
    return KernelParam(name=name, space=space, base=base, pointer=pointer, width=width)


def _is_type_word(word: str, typedefs: dict[str, tuple[str, ...]]) -> bool:
    vec = _VECTOR.match(word)
    return (word in _SCALARS or word in typedefs or word in _ALIASES or word in ("unsigned", "signed", "void")
            or (vec is not None and vec.group(1) in _SCALARS))


def _resolve(words: tuple[str, ...], typedefs: dict[str, tuple[str, ...]], depth: int) -> tuple[str, bool, str]:
    """(canonical base type, whether a typedef added a pointer, an address space a typedef added)."""
    if depth > 16:
        raise KernelSignatureError("typedefs nest too deeply to resolve")
    if words in _MULTIWORD:
        return _MULTIWORD[words], False, ""
    if len(words) != 1:
        return " ".join(words) or "?", False, ""
    word = words[0]
    if word in typedefs:
        target = typedefs[word]
        pointer = "*" in target or "[" in target
        target_words = [t for t in target if re.match(r"[A-Za-z_]", t)]
        space = next((ADDRESS_SPACES[w] for w in target_words if w in ADDRESS_SPACES), "")
        inner = tuple(w for w in target_words if w not in ADDRESS_SPACES and w not in QUALIFIERS)
        if inner == (word,):  # typedef struct S S;
            return word, pointer, space
        base, inner_ptr, inner_space = _resolve(inner, typedefs, depth + 1)
        return base, pointer or inner_ptr, space or inner_space
    return _ALIASES.get(word, word), False, ""
