"""The C preprocessor kernelcast trusts: pcpp, confined to the kernel's own text.

Two things need a kernel as the compiler sees it, not as it is written: a
candidate's identity (template points that preprocess to the same code are
the same candidate) and the signature check (an ``#if 0`` decoy must not pass
for the entry point). Both run :func:`preprocess`. It never opens a file:
``#include`` and its relatives are refused before anything is parsed
(:func:`confinement_problem`), so no file's content can reach a compile log, an
error message or the store.

Two views of a source:

- :func:`preprocess` models the compiler's predefined macros (``language.predefined_macros``), so that
  ``#ifdef __OPENCL_VERSION__`` picks the branch the compiler most likely picks: good enough to find the entry
  point, never trusted for security.
- :func:`preprocess_all_branches` decides nothing the compiler decides. A conditional on an identifier the
  compiler may define itself (any reserved name, ``__clang__``, ``__OPENCL_C_VERSION__``, a vendor's ``__X__``,
  or the non-reserved ``CL_VERSION_*``, ``cl_*`` extension and ``FP_FAST_FMA*`` families) is kept, directive and
  every branch, unless a build option defines that name. What a device compiler of any vendor or version could
  compile is therefore all in the output: a candidate's identity and the program-state check read this view, so
  a block hidden behind ``#ifdef __clang__`` changes the identity and its declarations are scanned. (Asking one
  device's compiler would tie a candidate's identity to a device; this view holds on every device, and the
  runtime's own report of program-scope storage, after the build, is the authority.)
"""

from __future__ import annotations

import copy
import io
import re
from functools import lru_cache

from pcpp import Preprocessor

from kernelcast.tools.core import language as lang
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.language import OPENCL

MAX_SOURCE_BYTES = 256 * 1024  # a kernel source (candidate or task file); the built-ins are under 8 KiB

# directives that read another file (clang accepts #import in C as an extension; #embed is C23)
FILE_DIRECTIVES = ("include", "include_next", "import", "embed")
# operators that probe the file system from an #if
FILE_PROBES = ("__has_include", "__has_include_next", "__has_embed")

# build options that define a macro for the compiler, so the preprocessor must see them too
_OPTION_MACROS = {"-cl-fast-relaxed-math": "__FAST_RELAXED_MATH__", "--use_fast_math": "__USE_FAST_MATH__",
                  "-use_fast_math": "__USE_FAST_MATH__"}

_COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_DIRECTIVE = re.compile(r"^[ \t\f\v]*(?:#|%:)[ \t\f\v]*([A-Za-z_]\w*)", re.M)
_PROBE = re.compile(r"\b(" + "|".join(FILE_PROBES) + r")\b")
_DEFINE_OPTION = re.compile(r"^-D\s*([A-Za-z_]\w*)(?:=(.*))?$", re.S)
# identifiers a compiler may predefine besides reserved ones (``_X``, ``__x``): OpenCL's version and extension
# macros, C's fast-FMA macros, and the old Unix target names
_COMPILER_NAMES = re.compile(r"^(?:_[A-Z_].*|__.*|CL_VERSION_\w+|cl_\w+|FP_FAST_FMA\w*|linux|unix|i386)$")


class PreprocessError(InputError, ValueError):
    """The source cannot be preprocessed, or it reaches outside itself (``#include`` and the like)."""


def blank_comments_and_literals(source: str) -> str:
    """``source`` as the compiler's first phases see it, with comments and string/char literals blanked.

    Trigraphs and line continuations are resolved and each comment becomes one space (so ``#/*...*/include``
    is still a directive); what is left is code and directives, and a decoy in a string or a comment
    cannot match a search.
    """
    def blank(match: re.Match[str]) -> str:
        text = match.group(0)
        if text.startswith(("//", "/*")):
            return " "
        return text[0] + " " * (len(text) - 2) + text[-1] if len(text) > 1 else " "

    text = source.replace("??=", "#").replace("??/", "\\")
    joined = text.replace("\\\r\n", "").replace("\\\n", "")  # line continuations, as the compiler does
    return _COMMENT_OR_LITERAL.sub(blank, joined)


def confinement_problem(source: str) -> str | None:
    """Why ``source`` may not be compiled or preprocessed (it is too large or reads other files), or None.

    The reason never quotes the source beyond the offending directive's name.
    """
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        return f"the source is {size} bytes; the limit is {MAX_SOURCE_BYTES} bytes ({MAX_SOURCE_BYTES // 1024} KiB)"
    if "\x00" in source:
        return "the source contains a NUL character"
    code = blank_comments_and_literals(source)
    for match in _DIRECTIVE.finditer(code):
        if match.group(1) in FILE_DIRECTIVES:
            return (f"the source uses #{match.group(1)}: kernel sources must be self-contained "
                    "(no #include, #include_next, #import or #embed)")
    probe = _PROBE.search(code)
    if probe:
        return f"the source uses {probe.group(1)}: kernel sources may not probe for files"
    return None


def option_defines(options: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The macros ``-D`` options (and fast-math flags) define for the compiler."""
    out: dict[str, str] = {}
    items = list(options)
    i = 0
    while i < len(items):
        opt = items[i]
        if opt == "-D" and i + 1 < len(items):
            opt, i = "-D" + items[i + 1], i + 1
        match = _DEFINE_OPTION.match(opt)
        if match:
            out[match.group(1)] = match.group(2) if match.group(2) is not None else "1"
        elif opt in _OPTION_MACROS:
            out[_OPTION_MACROS[opt]] = "1"
        i += 1
    return out


def compiler_may_define(name: str) -> bool:
    """Whether a device compiler may predefine ``name`` (so only the compiler can tell whether it is defined)."""
    return bool(_COMPILER_NAMES.match(name))


class _ConfinedPreprocessor(Preprocessor):
    """pcpp that cannot open files, keeps its errors, and has no clock-dependent macros. With
    ``all_branches``, a conditional on a name the compiler may define is passed through with all its branches,
    and the ``#define``/``#undef`` lines inside it stay in the output (which branch's definition holds is the
    compiler's choice); ``first_definitions`` keeps a macro's first definition where a later one would replace it
    without an ``#undef`` (the other reading of two branches that define one name)."""

    def __init__(self, all_branches: bool = False, first_definitions: bool = False) -> None:
        self.first_definitions = False  # pcpp's constructor defines its own macros through define()
        super().__init__()
        self.line_directive = None
        self.errors: list[str] = []
        self.all_branches = all_branches
        self.first_definitions = first_definitions
        for volatile in ("__DATE__", "__TIME__", "__PCPP__"):
            self.macros.pop(volatile, None)
        if all_branches:  # pcpp's own predefined names (__STDC__, ...) are the compiler's to define
            for name in [n for n in self.macros if compiler_may_define(n)]:
                self.macros.pop(name, None)

    def on_unknown_macro_in_defined_expr(self, tok):
        if self.all_branches and compiler_may_define(tok.value):
            return None  # passed through: the compiler decides
        return super().on_unknown_macro_in_defined_expr(tok)

    def on_unknown_macro_in_expr(self, ident):
        if self.all_branches and compiler_may_define(str(ident)):
            return None
        return super().on_unknown_macro_in_expr(ident)

    def on_unknown_macro_function_in_expr(self, ident):
        if self.all_branches and compiler_may_define(str(ident)):
            return None
        return super().on_unknown_macro_function_in_expr(ident)

    def on_error(self, file: str, line: int, msg: str) -> None:
        self.errors.append(f"line {line}: {msg}")
        self.return_code += 1

    def on_file_open(self, is_system_include: bool, includepath: str) -> None:
        raise PreprocessError("kernel sources must be self-contained (no #include)")

    def on_include_not_found(self, is_malformed: bool, is_system_include: bool, curdir: str, includepath: str) -> None:
        raise PreprocessError("kernel sources must be self-contained (no #include)")

    def on_directive_handle(self, directive, toks, ifpassthru, precedingtoks):
        if directive.value in FILE_DIRECTIVES:
            raise PreprocessError(f"#{directive.value}: kernel sources must be self-contained")
        handled = super().on_directive_handle(directive, toks, ifpassthru, precedingtoks)
        if self.all_branches and ifpassthru and directive.value in ("define", "undef"):
            return None  # executed and kept in the output
        return handled

    def define(self, tokens):
        if self.first_definitions:
            name = tokens.split(None, 1)[0].split("(", 1)[0] if isinstance(tokens, str) else next(
                (t.value for t in tokens if t.type != self.t_SPACE), "")
            if name in self.macros:
                return
        super().define(tokens)

    def on_directive_unknown(self, directive, toks, ifpassthru, precedingtoks):
        if directive.value == "error":
            self.errors.append(f"line {directive.lineno}: #error {''.join(t.value for t in toks).strip()}"[:300])
            self.return_code += 1
            return True
        if directive.value == "warning":
            return True
        if directive.value in FILE_DIRECTIVES:
            raise PreprocessError(f"#{directive.value}: kernel sources must be self-contained")
        if directive.value == "pragma" and toks and toks[0].value not in ("OPENCL", "STDC"):
            self._expand_in_place(toks)
        return None  # #pragma and friends stay in the output: they are part of the code

    def _expand_in_place(self, toks: list) -> None:
        """Macros in ``#pragma unroll N`` and the like are expanded (clang does so for loop hints), so
        ``-DUNROLL=2`` and ``-DUNROLL=4`` stay different code. pcpp passes the directive's own token objects,
        so rewriting their values rewrites the output line."""
        expanded = "".join(t.value for t in self.expand_macros([copy.copy(t) for t in toks]))
        toks[0].value = expanded
        for tok in toks[1:]:
            tok.value = ""


def preprocess(source: str, language: str = OPENCL.name, build_options: tuple[str, ...] = ()) -> str:
    """The source after preprocessing, as the compiler would see it for ``build_options``.

    Raises :class:`PreprocessError` (never anything else) for a source that reaches outside itself or that
    the preprocessor cannot handle; the message quotes nothing but the kernel's own text.
    """
    return _preprocess(source, language, tuple(build_options), False, False)


def preprocess_all_branches(source: str, language: str = OPENCL.name, build_options: tuple[str, ...] = (),
                            first_definitions: bool = False) -> str:
    """The source after preprocessing with every branch the compiler decides kept (see the module's docstring):
    what any device compiler could compile for ``build_options``, in the options' own order (the last ``-D`` of a
    name wins, as in the compiler). A macro defined in two such branches expands as its last definition, or with
    ``first_definitions`` as its first. Raises :class:`PreprocessError` as :func:`preprocess` does."""
    return _preprocess(source, language, tuple(build_options), True, first_definitions)


@lru_cache(maxsize=1024)  # the hash and the signature check of one candidate come close together
def _preprocess(source: str, language: str, build_options: tuple[str, ...], all_branches: bool,
                first_definitions: bool) -> str:
    problem = confinement_problem(source)
    if problem:
        raise PreprocessError(problem)
    pp = _ConfinedPreprocessor(all_branches, first_definitions)
    modelled = {} if all_branches else dict(lang.language(language).predefined_macros)
    for name, value in {**modelled, **option_defines(build_options)}.items():
        if "\n" in value or "\r" in value:
            raise PreprocessError(f"build option -D{name}: a macro value may not span lines")
        pp.define(f"{name} {value}")
    out = io.StringIO()
    try:
        pp.parse(source, source="kernel")
        pp.write(out)
    except PreprocessError:
        raise
    except RecursionError:
        raise PreprocessError("the source nests macros or conditionals too deeply to preprocess") from None
    except Exception as exc:  # noqa: BLE001 - pcpp's own failures on odd input are a clear error, not a crash
        raise PreprocessError(f"the preprocessor cannot read the source ({type(exc).__name__}: {exc})"[:300]) from None
    if pp.errors:
        raise PreprocessError("preprocessing failed: " + "; ".join(pp.errors[:3]))
    return out.getvalue()
