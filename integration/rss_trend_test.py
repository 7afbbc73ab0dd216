"""rss_trend.floor_growth on synthetic RSS traces with a known truth.

The traces imitate the soak's: a floor, plus at each quiescent point the
buffers of the shapes drawn last (log-uniform sizes, as the soak draws
them, 1 MiB to 400 MiB), plus, where a leak is modelled, a known number of
bytes per second. The truth is the leak, so the oracle is closed form.
"""

import unittest

import numpy as np

from rss_trend import floor_growth

FLOOR_MIB = 300.0


def trace(seed, seconds=60.0, samples=120, leak_mib_per_s=0.0):
    rng = np.random.RandomState(seed)
    t = np.linspace(0.0, seconds, samples)
    swing = np.exp(rng.uniform(np.log(1.0), np.log(400.0), samples)) - 1.0
    rss = FLOOR_MIB + swing + leak_mib_per_s * t
    return list(zip(t.tolist(), rss.tolist()))


class FloorGrowthTest(unittest.TestCase):

    def test_swings_alone_read_as_no_growth(self):
        naive = []
        for seed in range(20):
            samples = trace(seed)
            got = floor_growth(samples)
            self.assertLess(abs(got["floor_growth"]), 0.01, f"seed {seed}")
            # The slope is no trend: within 3 standard errors of zero.
            self.assertLess(abs(got["slope"]), 3 * got["slope_stderr"],
                            f"seed {seed}: {got}")
            warm = [r for s, r in samples if s >= 0.2 * 60.0][0]
            naive.append((samples[-1][1] - warm) / warm)
        # Why the floor: the end-vs-warm-up figure of the same traces
        # swings far beyond a 1% bound.
        self.assertGreater(max(abs(g) for g in naive), 0.2)

    def test_a_leak_shows_as_at_least_a_third_of_it(self):
        seconds, leak = 60.0, 0.5  # 0.5 MiB/s: 24 MiB after warm-up, 8%
        after_warmup = 0.8 * seconds * leak
        for seed in range(20):
            got = floor_growth(trace(seed, seconds, leak_mib_per_s=leak))
            # At least a third of the post-warm-up leak, less the floor's
            # noise bound of the test above, at most all of it plus that.
            self.assertGreater(got["floor_growth"],
                               (after_warmup / 3) / FLOOR_MIB - 0.01)
            self.assertLess(got["floor_growth"],
                            after_warmup / FLOOR_MIB + 0.01)
            self.assertGreater(got["floor_growth"], 0.01, f"seed {seed}")

    def test_a_steady_trace_is_exact(self):
        samples = [(float(i), 100.0 + 2.0 * i) for i in range(30)]
        got = floor_growth(samples, warmup_fraction=0.0, windows=3)
        # Windows [0, 9.67] and [19.33, 29]: minima 100 and 100 + 2 * 20.
        self.assertEqual(got["floor_early"], 100.0)
        self.assertEqual(got["floor_late"], 140.0)
        self.assertAlmostEqual(got["floor_growth"], 0.4)
        self.assertAlmostEqual(got["slope"], 2.0)
        self.assertAlmostEqual(got["slope_stderr"], 0.0)

    def test_bad_input_is_named(self):
        with self.assertRaisesRegex(ValueError, "no RSS samples"):
            floor_growth([])
        with self.assertRaisesRegex(ValueError, "windows must be at least 2"):
            floor_growth([(0.0, 1.0)], windows=1)
        with self.assertRaisesRegex(ValueError, "warmup_fraction"):
            floor_growth([(0.0, 1.0)], warmup_fraction=1.0)


if __name__ == "__main__":
    unittest.main()
