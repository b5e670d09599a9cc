"""Writable program-scope storage, read from what the compiler built, not from the source.

A device compiler knows which variables a program keeps; a preprocessor of our own only guesses (the last round's
check read ``memo[(384 * 384)]`` as a prototype, and could not see a block behind ``#ifdef __clang__``). So after a
build the runner reads the compiled binary:

- an ELF object (Intel's CPU runtime nests one, ``.ocl.obj``, inside its program binary; AMD's code objects are
  ELF too): every data symbol (``STT_OBJECT``) in a writable section (``SHF_WRITE``: ``.data``, ``.bss`` and their
  large-model ``.l*`` relatives) is storage the program can write and keep between launches; ``__constant`` and
  ``const`` data lie in read-only sections;
- PTX (NVIDIA): module-scope declarations in the ``.global`` state space (``.const`` is read-only).

A binary in any other format (PoCL's, which holds only LLVM bitcode) gives no answer (``None``): the source gate
(:mod:`kernelcast.tools.core.program_state`) is then the only check.
"""

from __future__ import annotations

import re
import struct

_ELF_MAGIC = b"\x7fELF"
_SHT_SYMTAB, _SHT_NOBITS = 2, 8
_SHF_WRITE = 0x1
_STT_OBJECT = 1
_MAX_DEPTH = 3  # an ELF nested in an ELF nested in one: deeper is no compiler's format

# a module-scope variable in the global state space: ``.visible .global .align 4 .b8 memo[4096];``, a function's
# ``static`` (``.global .u32 _ZZ4kernE5count;``) and ``__managed__`` ones alike; ``.const`` is read-only
_PTX_GLOBAL = re.compile(r"^\s*(?:\.(?:visible|weak|extern)\s+)*\.global\s+(?:\.attribute\([^)]*\)\s+)?"
                         r"(?:\.align\s+\d+\s+)?(?:\.[a-z]\w*\s+)+([A-Za-z_$%][\w$]*)", re.M)


def ptx_global_variables(ptx: str) -> list[str]:
    """The names of the writable module-scope variables a PTX module declares."""
    return _PTX_GLOBAL.findall(ptx)


def writable_symbols(binary: bytes) -> list[str] | None:
    """The writable program-scope variables a compiled program keeps, by name, or None when the binary's format
    says nothing (neither an ELF object nor PTX)."""
    if binary.startswith(_ELF_MAGIC):
        return _elf_writable(binary, 0)
    head = binary[:4096].decode("ascii", errors="replace")
    if ".version" in head and ".target" in head:  # PTX text
        return ptx_global_variables(binary.decode("utf-8", errors="replace"))
    return None


def _elf_writable(data: bytes, depth: int) -> list[str] | None:
    """Writable data symbols of a little-endian ELF64 file, and of ELF files nested in its sections."""
    if len(data) < 64 or data[4] != 2 or data[5] != 1:  # ELFCLASS64, ELFDATA2LSB
        return None
    try:
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQII", data, shoff + i * shentsize) for i in range(shnum)]
    except struct.error:
        return None
    names: list[str] = []
    for _, kind, _, _, offset, size, link, _ in sections:
        if kind == _SHT_SYMTAB:
            names += _symtab_writable(data, sections, offset, size, link)
        elif kind != _SHT_NOBITS and depth < _MAX_DEPTH and data[offset:offset + 4] == _ELF_MAGIC:
            names += _elf_writable(data[offset:offset + size], depth + 1) or []
    return names


def _symtab_writable(data: bytes, sections: list[tuple[int, ...]], offset: int, size: int, link: int) -> list[str]:
    strtab_offset = sections[link][4] if link < len(sections) else 0
    found = []
    for at in range(offset, offset + size - 23, 24):
        name, info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, at)
        if info & 0xF != _STT_OBJECT or not 0 < shndx < len(sections):
            continue
        if sections[shndx][2] & _SHF_WRITE:
            end = data.find(b"\0", strtab_offset + name)
            found.append(data[strtab_offset + name:end].decode("utf-8", errors="replace"))
    return found
