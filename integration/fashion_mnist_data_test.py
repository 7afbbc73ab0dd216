"""The idx reader against hand-built files, and the real data set."""

import os
import struct
import unittest

import numpy as np

import fashion_mnist_data as fm


def idx(type_code, dims, payload):
    header = struct.pack(">HBB", 0, type_code, len(dims))
    return header + struct.pack(">" + "I" * len(dims), *dims) + payload


class ParseIdxTest(unittest.TestCase):

    def test_uint8_and_big_endian_int32(self):
        a = fm.parse_idx(idx(0x08, (2, 3), bytes(range(6))))
        np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))
        b = fm.parse_idx(idx(0x0C, (2,), struct.pack(">ii", -1, 258)))
        np.testing.assert_array_equal(b, [-1, 258])
        self.assertTrue(b.dtype.isnative)

    def test_malformed(self):
        for data, message in (
                (b"\x00\x00", "shorter than a header"),
                (b"\x01\x00\x08\x01" + b"\x00" * 8, "bad magic"),
                (idx(0x42, (1,), b"\x00"), "bad magic"),
                (idx(0x08, (4,), b"\x00" * 3), "payload bytes"),
                (idx(0x08, (4,), b"\x00" * 5), "payload bytes"),
                (struct.pack(">HBB", 0, 8, 2) + b"\x00\x00\x00\x01",
                 "truncated")):
            with self.assertRaisesRegex(fm.IdxFormatError, message):
                fm.parse_idx(data, name="x")

    def test_shard(self):
        x = np.arange(10)
        parts = [fm.shard(x, x, r, 3)[0] for r in range(3)]
        self.assertEqual([len(p) for p in parts], [3, 3, 3])
        np.testing.assert_array_equal(np.concatenate(parts), np.arange(9))
        with self.assertRaises(ValueError):
            fm.shard(x, x, 3, 3)


@unittest.skipUnless(os.path.exists(fm.DEFAULT_DIR), "dataset not installed")
class DatasetTest(unittest.TestCase):

    def test_shapes_and_ranges(self):
        train_x, train_y, test_x, test_y = fm.load()
        self.assertEqual(train_x.shape, (60000, 1, 28, 28))
        self.assertEqual(test_x.shape, (10000, 1, 28, 28))
        self.assertEqual(train_x.dtype, np.float32)
        self.assertEqual((train_x.min(), train_x.max()), (0.0, 1.0))
        # Fashion-MNIST is balanced: 6000 and 1000 images per class.
        np.testing.assert_array_equal(np.bincount(train_y), [6000] * 10)
        np.testing.assert_array_equal(np.bincount(test_y), [1000] * 10)


if __name__ == "__main__":
    unittest.main()
