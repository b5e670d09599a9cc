"""State that outlives a launch: program-scope and ``static`` variables a kernel could write.

The harness resets every buffer it owns before each launch, so a kernel cannot find its previous results
there. Memory the program itself owns is out of its reach: OpenCL 2.0's program-scope variables (``global
float cache[N];``, or without a qualifier, which is global in 2.0) and function-scope ``static`` variables,
CUDA's ``__device__``/``__managed__`` variables and ``static`` locals all survive from one launch to the
next. A kernel may keep its result there and copy it out later, or count its launches and compute only on the
ones it expects to be checked. Such a kernel is refused before it is compiled, whatever it does with the
variable; a ``const`` (or ``__constant``) one cannot be written and stays allowed.

The scan reads the preprocessed source (so a macro cannot hide a declaration) with every branch the compiler
decides kept (``preprocess_all_branches``: a memo behind ``#ifdef __clang__`` is scanned whatever the device),
comments and literals blanked, token by token: declarations at file scope, and ``static`` inside function
bodies. It is the fast first gate, before a compile; the authority is the runtime's own count of the built
program's program-scope storage, asked after every build (``Runner.build``).
"""

from __future__ import annotations

import re

from kernelcast.tools.core import language as lang
from kernelcast.tools.core.language import OPENCL
from kernelcast.tools.core.preprocess import PreprocessError, blank_comments_and_literals, preprocess_all_branches

_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\S")
_ATTRIBUTE = re.compile(r"\b(?:__attribute__|__launch_bounds__|__declspec|alignas|_Alignas)\s*\(")
# what makes a declaration unwritable: OpenCL's constant address space and C's const; CUDA's __constant__
# memory is written by the host only
_READ_ONLY = {"const", "__constant", "constant", "__constant__"}
_TAGS = {"struct", "union", "enum"}


def mutable_state_problem(source: str, language: str = OPENCL.name, build_options: tuple[str, ...] = ()) -> str | None:
    """Why ``source`` keeps writable state between launches (naming the variable), or None.

    Read twice: a macro that two compiler-decided branches define differently expands as its last definition
    in one reading and its first in the other. A source the preprocessor refuses is left to the checks that
    report it (the confinement and signature checks run first)."""
    for first_definitions in (False, True):
        try:
            code = blank_comments_and_literals(preprocess_all_branches(source, language, tuple(build_options),
                                                                       first_definitions))
        except PreprocessError:
            return None
        if problem := _state_in(code, language):
            return problem
    return None


def _state_in(code: str, language: str) -> str | None:
    """The first writable program-scope or ``static`` variable in preprocessed ``code``, as a reason."""
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))
    tokens = _TOKEN.findall(_strip_attributes(code))
    for declaration in _file_scope_declarations(tokens):
        if _declares_writable_storage(declaration, language):
            return (f"program-scope variable {_declared_name(declaration)!r} is writable: state kept in the "
                    "program survives between launches (a kernel could keep its results or count its launches "
                    "there); declare it const or __constant, or keep it in a buffer argument")
    for statement in _static_locals(tokens):
        if not _READ_ONLY & set(statement) and "__shared__" not in statement:
            return (f"static variable {_declared_name(statement)!r} inside a function keeps its value between "
                    "launches; declare it const or drop static")
    return None


def _strip_attributes(code: str) -> str:
    """Without ``__attribute__((...))`` and relatives: their parentheses would read as a function's."""
    while match := _ATTRIBUTE.search(code):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(code)):
            depth += {"(": 1, ")": -1}.get(code[end], 0)
            if depth == 0:
                break
        code = code[:match.start()] + " " + code[end + 1:]
    return code


def _skip_block(tokens: list[str], start: int) -> int:
    """The index after the ``}`` that closes the ``{`` at ``start`` (the end for an unclosed one)."""
    depth = 0
    for i in range(start, len(tokens)):
        depth += {"{": 1, "}": -1}.get(tokens[i], 0)
        if depth == 0:
            return i + 1
    return len(tokens)


def _file_scope_declarations(tokens: list[str]) -> list[list[str]]:
    """The file-scope declarations that are neither functions nor typedefs, each as its tokens (a tag's body
    and an initializer's braces dropped); function bodies are skipped."""
    declarations: list[list[str]] = []
    item: list[str] = []
    i, parens = 0, 0
    while i < len(tokens):
        token = tokens[i]
        parens += {"(": 1, ")": -1}.get(token, 0)
        if token == "{" and parens == 0:
            after = _skip_block(tokens, i)
            if item and item[-1] == ")" and "=" not in item:  # a function's body: the item was its head
                item, i = [], after
                continue
            item.append("{}")  # a struct's body or an initializer: the declaration goes on to its ';'
            i = after
            continue
        if token == ";" and parens == 0:
            if item and item[0] != "typedef" and not _is_function_or_tag_only(item):
                declarations.append(item)
            item = []
        else:
            item.append(token)
        i += 1
    return declarations


def _is_function_or_tag_only(item: list[str]) -> bool:
    """A prototype (``float f(int);``) or a bare tag definition (``struct S {...};``): no variable. A parenthesis
    inside array bounds (``memo[(384 * 384)]``, a parenthesized macro) or around a pointer declarator
    (``int (*p)[4]``) does not make a function."""
    before_init = _outside_brackets(item[:item.index("=")] if "=" in item else item)
    if any(token == "(" and (i + 1 >= len(before_init) or before_init[i + 1] != "*")
           for i, token in enumerate(before_init)):
        return True
    if item[0] not in _TAGS:
        return False
    return item[-1] == "{}" or (len(item) == 2 and "{}" not in item)  # a body with no declarator, or `struct S;`


def _outside_brackets(tokens: list[str]) -> list[str]:
    """``tokens`` without what lies between square brackets (array bounds)."""
    out: list[str] = []
    depth = 0
    for token in tokens:
        if token == "[":
            depth += 1
        elif token == "]":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(token)
    return out


def _declares_writable_storage(declaration: list[str], language: str) -> bool:
    """Whether a file-scope declaration is a variable its program could write."""
    device_storage = lang.language(language).device_storage_words
    if device_storage is not None and not device_storage & set(declaration):
        return False  # host memory or __shared__/__constant__: device code cannot keep a launch's state there
    if "extern" in declaration and "__shared__" in declaration:
        return False
    head = declaration[:declaration.index("=")] if "=" in declaration else declaration
    if "*" in head:  # a pointer is read-only only when const qualifies the pointer itself
        return "const" not in head[len(head) - head[::-1].index("*"):]
    return not _READ_ONLY & set(head)


def _static_locals(tokens: list[str]) -> list[list[str]]:
    """The statements inside braces that contain ``static``, each whole (``const static int K`` is const)."""
    statements: list[list[str]] = []
    depth = 0
    for i, token in enumerate(tokens):
        depth += {"{": 1, "}": -1}.get(token, 0)
        if token == "static" and depth > 0:
            start = next((j + 1 for j in range(i - 1, -1, -1) if tokens[j] in (";", "{", "}")), 0)
            end = next((j for j in range(i, len(tokens)) if tokens[j] in (";", "{", "}")), len(tokens))
            statements.append(tokens[start:end])
    return statements


def _declared_name(tokens: list[str]) -> str:
    """The declared name: the last identifier before an initializer, array bounds or the end."""
    head = tokens[:tokens.index("=")] if "=" in tokens else tokens
    if "[" in head:
        head = head[:head.index("[")]
    names = [t for t in head if re.fullmatch(r"[A-Za-z_]\w*", t)]
    return names[-1] if names else "?"
