"""What a soak's resident memory is made of, read from the process itself.

RSS alone cannot tell a leak from the allocator keeping freed pages. This
module splits a quiescent point's memory into parts the soak can trace:

  rss_parts()    /proc/self/status: RssAnon (heap, mmapped buffers, stacks),
                 RssFile (pages of mapped files: code and data of the
                 libraries, touched lazily the first time a path runs),
                 RssShmem.
  mallinfo2()    glibc's own account, summed over every arena: `arena` (bytes
                 the heaps hold from the system), `uordblks` (in use by the
                 program), `fordblks` (free but kept inside the heaps),
                 `hblkhd` (live blocks mmapped on their own). A leak raises
                 uordblks or hblkhd; fragmentation raises fordblks and
                 arena with uordblks flat.
  malloc_trim()  glibc's malloc_trim(0): hands every whole free page inside
                 every arena back to the system (not only the top of the
                 main heap, which is all MALLOC_TRIM_THRESHOLD_ governs).

Each returns None where the C library is not glibc, so the soak still runs
(and says so). Python's own objects are counted by gc, not here.
"""

import ctypes
import ctypes.util


class _Mallinfo2(ctypes.Structure):
    # glibc >= 2.33, every field a size_t.
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
        "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc():
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return lib


_LIBC = _libc()
_HAS_MALLINFO2 = _LIBC is not None and hasattr(_LIBC, "mallinfo2")
if _HAS_MALLINFO2:
    _LIBC.mallinfo2.restype = _Mallinfo2
    _LIBC.mallinfo2.argtypes = []
_HAS_TRIM = _LIBC is not None and hasattr(_LIBC, "malloc_trim")
if _HAS_TRIM:
    _LIBC.malloc_trim.restype = ctypes.c_int
    _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]


def mallinfo2():
    """glibc's heap figures in KiB ({field: KiB}), or None without glibc
    2.33+. Summed over every arena by glibc itself."""
    if not _HAS_MALLINFO2:
        return None
    info = _LIBC.mallinfo2()
    return {name: getattr(info, name) // 1024 for name, _ in info._fields_
            if name in ("arena", "hblkhd", "uordblks", "fordblks",
                        "keepcost")}


def malloc_trim():
    """Returns free pages of every arena to the system. True if glibc
    released memory, False if it had none to release, None without glibc."""
    if not _HAS_TRIM:
        return None
    return bool(_LIBC.malloc_trim(0))


def rss_parts():
    """{VmRSS, RssAnon, RssFile, RssShmem} of this process in KiB (a field
    the kernel does not report is left out)."""
    keys = ("VmRSS", "RssAnon", "RssFile", "RssShmem")
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in keys:
                out[key] = int(line.split()[1])
    return out


def sample(trim=False):
    """One quiescent point: rss_parts() and mallinfo2(), with `live` (KiB the
    program holds through malloc: uordblks + hblkhd; None without glibc).
    With trim, malloc_trim() runs first and `VmRSS` is what remains;
    `untrimmed` is VmRSS just before it, so a run can show how much of its
    RSS was free pages the allocator kept."""
    point = {}
    if trim:
        point["untrimmed"] = rss_parts().get("VmRSS")
        malloc_trim()
    point.update(rss_parts())
    info = mallinfo2()
    point["malloc"] = info
    point["live"] = None if info is None else info["uordblks"] + info["hblkhd"]
    return point
