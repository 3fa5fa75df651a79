"""Inputs for fir_filter: 0..1024 samples, 1..32 Q15 taps, varied loudness and gain.

The inner loop's total, sum over i of min(i+1, taps), varies with both n and taps;
the saturation arms run only when loud samples meet a large gain, so gain, loudness
and kind of signal (noise, sine, square) are drawn over wide ranges.
One input in ten is slow: 1024 samples, 32 taps, a loud slow sine and high gain.
"""

import numpy as np

MAX_N = 1024
MAX_TAPS = 32


def _signal(rng, kind, n, loud, max_freq=0.5):
    t = np.arange(n)
    if kind == 0:       # white noise: the taps' sum grows only like sqrt(taps)
        x = rng.normal(0.0, loud, n)
    elif kind == 1:     # sine: slow ones add up coherently over the taps
        x = loud * np.sin(2 * np.pi * rng.uniform(0.001, max_freq) * t + rng.uniform(0, 6.3))
    else:               # square wave of random period
        half = int(rng.integers(1, 200))
        x = np.where((t // half) % 2 == 0, loud, -loud)
    return np.clip(x, -32768, 32767).astype(np.int16)


def generate(ctx):
    rng = ctx.rng
    if ctx.index % 10 == 9:
        # slow: longest loops, and a loud slow sine through a high gain, which
        # saturates both ways for a good share of the outputs
        n, taps, loud, gain = MAX_N, MAX_TAPS, 32767.0, 4.0
        x = _signal(rng, 1, n, loud, max_freq=0.01)
    else:
        n = int(rng.integers(0, MAX_N + 1))
        taps = int(rng.integers(1, MAX_TAPS + 1))
        loud = float(np.exp(rng.uniform(np.log(10.0), np.log(32767.0))))
        gain = float(np.exp(rng.uniform(np.log(0.05), np.log(4.0))))
        x = _signal(rng, int(rng.integers(0, 3)), n, loud)
    # taps of one sign (low-pass like), so the gain really scales the output
    h = rng.uniform(0.2, 1.0, taps) * (gain * 32767.0 / taps) * rng.choice([-1.0, 1.0])
    h = np.clip(h, -32768, 32767).astype(np.int16)
    ffi = ctx.ffi
    return (ffi.new("short[]", x.tolist() or [0]), n,
            ffi.new("short[]", h.tolist()), taps,
            ffi.new("short[]", max(n, 1)))
