"""RSS growth of a long run, read through the allocator's swings.

A soak samples the resident set size (RSS) at quiescent points. What is
live there is a floor (what the process keeps: code, the engine's tables,
anything leaked) plus buffers sized by whatever was drawn last (fusion
buffers, error-feedback residuals, the allocator's free lists). The second
part swings by hundreds of MiB with no trend, so "RSS at the end vs RSS at
the end of warm-up" compares two random draws of the swing and says
nothing (a 30-minute run measured -48% that way while its floor moved by
less than 2%).

A leak adds to every sample, the lowest included. So the measure here is
the floor: the lowest sample of the first third of the run after warm-up
against the lowest of the last third. Swings are non-negative on top of
the floor, so each window's minimum is close to the floor whenever the
window holds a few quiescent points with small buffers live; a leak of s
bytes per second shows as at least s * (post-warm-up time) / 3. The
least-squares slope is reported beside it with its standard error, so a
reader can tell a trend from the swings: a slope within two standard
errors of zero is no trend.

Pure numpy, no terse: integration/rss_trend_test.py checks it on
synthetic traces (swings alone; swings and a leak).
"""

import math

import numpy as np


def floor_growth(samples, warmup_fraction=0.2, windows=3):
    """RSS growth after warm-up, read from the floor.

    samples: (seconds since start, RSS) pairs in time order, RSS in any
    unit. warmup_fraction: the share of the run (by time) that is warm-up
    and ignored. windows: the post-warm-up time is cut into this many equal
    windows; the first's minimum is compared with the last's.

    Returns a dict:
      floor_early, floor_late   the two minima (RSS units)
      floor_growth              (floor_late - floor_early) / floor_early
      slope, slope_stderr       least-squares RSS per second after warm-up
                                and its standard error (0 with < 3 samples)
      samples_early, samples_late
                                samples in the two windows
    Raises ValueError when a window holds no sample (too short a run to
    say anything), naming the window and the run's length.
    """
    if windows < 2:
        raise ValueError(f"windows must be at least 2, got {windows}")
    if not 0 <= warmup_fraction < 1:
        raise ValueError("warmup_fraction must be in [0, 1), got "
                         f"{warmup_fraction}")
    if not samples:
        raise ValueError("no RSS samples")
    t = np.array([s[0] for s in samples], dtype=np.float64)
    r = np.array([s[1] for s in samples], dtype=np.float64)
    start = t[0] + warmup_fraction * (t[-1] - t[0])
    keep = t >= start
    t, r = t[keep], r[keep]
    width = (t[-1] - start) / windows
    early = r[t <= start + width]
    late = r[t >= t[-1] - width]
    for what, window in (("first", early), ("last", late)):
        if window.size == 0:
            raise ValueError(f"the {what} window after warm-up holds no RSS "
                             f"sample ({len(samples)} samples over "
                             f"{samples[-1][0] - samples[0][0]:.1f} s)")
    slope, stderr = 0.0, 0.0
    if t.size >= 3 and np.ptp(t) > 0:
        (slope, intercept) = np.polyfit(t, r, 1)
        residual = r - (slope * t + intercept)
        dof = t.size - 2
        spread = np.sum((t - t.mean()) ** 2)
        stderr = math.sqrt(np.sum(residual ** 2) / dof / spread) if dof else 0
    lo, hi = float(early.min()), float(late.min())
    return dict(floor_early=lo, floor_late=hi,
                floor_growth=(hi - lo) / lo if lo > 0 else 0.0,
                slope=float(slope), slope_stderr=float(stderr),
                samples_early=int(early.size), samples_late=int(late.size))
