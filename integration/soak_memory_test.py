"""soak_memory against allocations of known size, made through glibc's own
malloc (ctypes), so the oracle is the byte count the test asked for."""

import ctypes
import unittest

import soak_memory

MIB = 1 << 20
LIBC = ctypes.CDLL("libc.so.6")
LIBC.malloc.restype = ctypes.c_void_p
LIBC.malloc.argtypes = [ctypes.c_size_t]
LIBC.free.argtypes = [ctypes.c_void_p]


def touched(nbytes):
    """malloc(nbytes), every page written (so it is resident)."""
    p = LIBC.malloc(nbytes)
    assert p, "malloc failed"
    ctypes.memset(p, 1, nbytes)
    return p


class SoakMemoryTest(unittest.TestCase):

    def setUp(self):
        self.assertIsNotNone(soak_memory.mallinfo2(),
                             "glibc 2.33+ (mallinfo2) is what this measures")

    def test_a_live_buffer_is_live_and_resident(self):
        before = soak_memory.sample()
        p = touched(64 * MIB)
        during = soak_memory.sample()
        LIBC.free(p)
        after = soak_memory.sample()
        # KiB throughout; 64 MiB = 65536 KiB.
        self.assertGreaterEqual(during["live"] - before["live"], 65536)
        self.assertGreaterEqual(during["RssAnon"] - before["RssAnon"], 60000)
        self.assertGreaterEqual(during["live"] - after["live"], 65536)

    def test_free_pages_kept_by_the_heap_go_back_with_trim(self):
        # 2048 blocks of 64 KiB (below the mmap threshold: from the heap);
        # all freed but the last, which pins the top of the heap, so glibc
        # keeps the 128 MiB of free pages resident until malloc_trim.
        blocks = [touched(64 << 10) for _ in range(2048)]
        for p in blocks[:-1]:
            LIBC.free(p)
        kept = soak_memory.sample()
        trimmed = soak_memory.sample(trim=True)
        LIBC.free(blocks[-1])
        self.assertGreaterEqual(kept["malloc"]["fordblks"], 120 * 1024)
        self.assertLess(kept["live"], trimmed["untrimmed"])
        # What trim gave back: at least 100 of the 128 MiB, and the sample
        # reports RSS before and after it.
        self.assertGreaterEqual(trimmed["untrimmed"] - trimmed["VmRSS"],
                                100 * 1024)
        self.assertGreaterEqual(kept["VmRSS"] - trimmed["VmRSS"], 100 * 1024)

    def test_parts_are_reported(self):
        parts = soak_memory.rss_parts()
        for key in ("VmRSS", "RssAnon", "RssFile"):
            self.assertGreater(parts[key], 0, key)
        self.assertLessEqual(parts["RssAnon"] + parts["RssFile"],
                             parts["VmRSS"] + 4)


if __name__ == "__main__":
    unittest.main()
