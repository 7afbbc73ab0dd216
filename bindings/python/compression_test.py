"""terse.Compression: every compressor name, CF handling, parsing, env."""

import unittest

from terse.compression import NAMES, Compression, Compressor


class CompressionTest(unittest.TestCase):

    def test_every_name_is_an_attribute(self):
        self.assertEqual(
            set(NAMES),
            {"none", "fp16", "bf16", "topk", "randomk", "dgc", "redsync",
             "threshold", "powersgd", "qsgd", "efsignsgd", "gravac",
             "accordion"})
        for name in NAMES:
            choice = getattr(Compression, name)
            self.assertEqual(choice.name, name)
            self.assertIsNone(choice.cf)
            self.assertEqual(choice.spec(), name)
            self.assertTrue(choice.doc)

    def test_cf(self):
        self.assertEqual(Compression.topk(cf=100).spec(), "topk:100")
        self.assertEqual(Compression.topk(100), Compressor("topk", 100))
        self.assertNotEqual(Compression.topk(100), Compression.topk)
        self.assertIsNone(Compression.topk.cf)  # The member is unchanged.
        with self.assertRaisesRegex(ValueError, "must be >= 1"):
            Compression.topk(0.5)

    def test_get(self):
        self.assertIs(Compression.get(Compression.fp16), Compression.fp16)
        self.assertEqual(Compression.get("TopK:10"), Compressor("topk", 10))
        self.assertEqual(Compression.get("dgc", cf=50).spec(), "dgc:50")
        with self.assertRaisesRegex(ValueError, "unknown compressor 'zip'.*"
                                    "accordion"):
            Compression.get("zip")
        with self.assertRaisesRegex(ValueError, "bad compression factor"):
            Compression.get("topk:x")
        with self.assertRaises(TypeError):
            Compression.get(3)

    def test_from_env(self):
        self.assertEqual(Compression.from_env({}), Compression.none)
        self.assertEqual(
            Compression.from_env({"TERSE_COMPRESSION": "gravac",
                                  "TERSE_CF": "10"}),
            Compressor("gravac", 10))
        with self.assertRaisesRegex(ValueError, "TERSE_COMPRESSION='bad'"):
            Compression.from_env({"TERSE_COMPRESSION": "bad"})


if __name__ == "__main__":
    unittest.main()
