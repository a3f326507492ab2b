"""The structural check of a cached object file, before any byte of it reaches LLVM's loader.

A cache entry is trusted like Python's own ``__pycache__``: the directory is this user's alone (mode 0700,
checked), so whoever can write an entry can already run code as this user. What the check guards against is
an entry that is *damaged* or *not ours* (a half-written or corrupted file, junk whose checksum happens to be
self-consistent, a file another frame-native version left): LLVM's RuntimeDyld trusts the bytes it is given
and crashes the process (SIGSEGV) on a malformed object. So an entry is loaded only when it is the kind of
object the code generator emits:

* ELF, 64-bit, this machine's byte order and architecture, relocatable (``ET_REL``); every header, section,
  string and relocation lies inside the file;
* one symbol table, whose global symbols are exactly the kernel's one symbol, defined in the file;
* no undefined symbol: the kernel calls nothing outside itself (the generator emits no calls), so an entry
  that would bind to a libc or Python function is refused;
* on x86-64, only the relocation kinds the generator's code uses.

Anything else (another object format, Mach-O or COFF included) is "not ours": the caller compiles afresh.
"""

from __future__ import annotations

import platform
import struct
import sys

__all__ = ["object_problem", "MAX_OBJECT_BYTES"]

#: The largest entry read (a kernel of a few hundred ops is tens of kilobytes): a bigger file is not ours.
MAX_OBJECT_BYTES = 4 << 20

_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}
_X86_64_RELOCATIONS = {1, 2, 4, 9, 10, 11, 24}  # 64, PC32, PLT32, GOTPCREL, 32, 32S, PC64
_SHT_SYMTAB, _SHT_RELA, _SHT_REL, _SHT_NOBITS = 2, 4, 9, 8
_SHN_UNDEF, _SHN_LORESERVE, _SHN_ABS = 0, 0xFF00, 0xFFF1


def object_problem(data: bytes, symbol: str) -> str | None:
    """Why ``data`` is not an object file the code generator could have made for ``symbol``, or None."""
    try:
        return _problem(data, symbol.encode())
    except (struct.error, IndexError, ValueError, UnicodeError) as exc:  # a read past an edge: malformed
        return f"malformed ({type(exc).__name__})"


def _problem(data: bytes, symbol: bytes) -> str | None:
    if len(data) > MAX_OBJECT_BYTES:
        return f"larger than {MAX_OBJECT_BYTES} bytes"
    machine = _MACHINES.get(platform.machine().lower())
    if machine is None:
        return f"objects for {platform.machine()} are not checked, so not loaded from the cache"
    if len(data) < 64 or data[:4] != b"\x7fELF":
        return "not an ELF object"
    if data[4] != 2 or data[5] != (1 if sys.byteorder == "little" else 2):
        return "not a 64-bit ELF object of this byte order"
    end = "<" if sys.byteorder == "little" else ">"
    e_type, e_machine = struct.unpack_from(end + "HH", data, 16)
    if e_type != 1 or e_machine != machine:
        return f"not a relocatable object for this machine (type {e_type}, machine {e_machine})"
    e_shoff, = struct.unpack_from(end + "Q", data, 40)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from(end + "HHH", data, 58)
    if e_shentsize != 64 or not 0 < e_shnum < 1024 or e_shoff + 64 * e_shnum > len(data):
        return "its section table lies outside the file"
    sections = [struct.unpack_from(end + "IIQQQQIIQQ", data, e_shoff + 64 * i) for i in range(e_shnum)]
    for i, (_, kind, _, _, offset, size, *_rest) in enumerate(sections):
        if kind != _SHT_NOBITS and offset + size > len(data):
            return f"section {i} lies outside the file"
    tables = [s for s in sections if s[1] == _SHT_SYMTAB]
    if len(tables) != 1:
        return f"{len(tables)} symbol tables (the kernel's object has one)"
    _, _, _, _, offset, size, link, _, _, entsize = tables[0]
    if entsize != 24 or size % 24 or link >= e_shnum:
        return "a malformed symbol table"
    strings = sections[link]
    text = data[strings[4]:strings[4] + strings[5]]
    count = size // 24
    defined = []
    for i in range(1, count):
        name, info, _, shndx, _, _ = struct.unpack_from(end + "IBBHQQ", data, offset + 24 * i)
        if name >= len(text):
            return f"symbol {i} has its name outside the string table"
        label = text[name:text.index(b"\0", name)]
        if shndx == _SHN_UNDEF:
            return f"it refers to {label.decode(errors='replace')!r}, defined elsewhere (the kernel calls nothing)"
        if _SHN_LORESERVE <= shndx != _SHN_ABS or (shndx < _SHN_LORESERVE and shndx >= e_shnum):
            return f"symbol {i} lies in no section of the file"
        if info >> 4 in (1, 2):  # global or weak: what the engine would export
            defined.append(label)
    if defined != [symbol]:
        return f"it defines {[d.decode(errors='replace') for d in defined]}, not exactly {symbol.decode()!r}"
    symtab = sections.index(tables[0])
    for rel in sections:
        if rel[1] not in (_SHT_RELA, _SHT_REL):
            continue
        step = 24 if rel[1] == _SHT_RELA else 16
        target = rel[7]  # sh_info: the section the relocations patch
        if rel[9] != step or rel[5] % step or target >= e_shnum or rel[6] != symtab:
            return "a malformed relocation section"
        for j in range(rel[5] // step):
            where, info = struct.unpack_from(end + "QQ", data, rel[4] + step * j)
            kind = info & 0xFFFFFFFF
            width = 8 if machine == 62 and kind in (1, 24) else 4
            if info >> 32 >= count or where + width > sections[target][5]:
                return "a relocation points outside its section or symbol table"
            if machine == 62 and kind not in _X86_64_RELOCATIONS:
                return f"a relocation of kind {kind}, which the generated code never uses"
    return None
