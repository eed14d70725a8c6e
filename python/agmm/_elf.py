"""What a shared library asks of the dynamic loader, read from its ELF file: the names it needs
(DT_NEEDED) and where it says to look (DT_RUNPATH, or the older DT_RPATH).

The package uses it to know, before loading libagmm.so, whether it is a CUDA build and which NCCL
and cuBLASLt sonames it will ask for (agmm/_deps.py), and the build backend to tag a wheel. Only
64-bit little-endian ELF (x86-64 and aarch64 Linux, what agmm builds for). No dependency besides
the standard library: the build backend loads this file by path.
"""
import struct

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 15, 29


def dynamic(path):
    """(needed, runpath): the sonames the library at `path` needs, in its order, and its RUNPATH
    (or RPATH) folders as written ($ORIGIN unexpanded). ValueError for a file that is not a 64-bit
    little-endian ELF object; OSError when it cannot be read."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dyn = [], None
    for i in range(phnum):
        p_type, _, offset, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == _PT_DYNAMIC:
            dyn = (offset, filesz)
    if dyn is None:
        return [], []          # linked statically: it needs nothing
    entries = []
    for at in range(dyn[0], dyn[0] + dyn[1], 16):
        tag, value = struct.unpack_from("<qQ", data, at)
        if tag == _DT_NULL:
            break
        entries.append((tag, value))
    # DT_STRTAB is an address once loaded: the loaded segment holding it says where it is in the file.
    strtab = next(value for tag, value in entries if tag == _DT_STRTAB)
    base = next(offset + strtab - vaddr for vaddr, offset, size in loads if vaddr <= strtab < vaddr + size)

    def string(index):
        start = base + index
        return data[start:data.index(b"\0", start)].decode()

    needed = [string(value) for tag, value in entries if tag == _DT_NEEDED]
    paths = [string(value) for tag, value in entries if tag == _DT_RUNPATH] or \
            [string(value) for tag, value in entries if tag == _DT_RPATH]
    runpath = [p for entry in paths for p in entry.split(":") if p]
    return needed, runpath
