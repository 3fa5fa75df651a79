"""Inputs for adpcm_coder: PCM signals of varied kind, loudness and length.

Which blocks run how often depends on the signal: quiet or smooth signals keep the
step small and rarely set the high magnitude bits; loud, jumpy ones push the table
position to its top (index clamp high) and overshoot 16 bits (sample clamps);
silence drives the position to its bottom (index clamp low).  The sign branch
follows the signal's slope.  Each input concatenates a few segments of random kinds
so those counts vary independently of each other and of the length.  One input in
ten is built to be slow: full length, full-scale noise or near silence (see below).
"""

import numpy as np

MAX_LEN = 2048


def _segment(rng, kind, n):
    t = np.arange(n)
    amp = float(np.exp(rng.uniform(np.log(4.0), np.log(40000.0))))
    if kind == 0:        # sine of random frequency
        x = amp * np.sin(2 * np.pi * rng.uniform(0.0005, 0.5) * t + rng.uniform(0, 6.3))
    elif kind == 1:      # white noise
        x = rng.normal(0.0, amp, n)
    elif kind == 2:      # near silence around a random offset
        x = rng.normal(0.0, 2.0, n) + rng.uniform(-100, 100)
    elif kind == 3:      # square wave of random period
        period = int(rng.integers(2, 200))
        x = np.where((t // max(1, period // 2)) % 2 == 0, amp, -amp)
    else:                # random walk
        x = np.cumsum(rng.normal(0.0, amp / 20.0, n))
    return x


def generate(ctx):
    rng = ctx.rng
    if ctx.index % 10 == 9:
        # slow: full length of the slowest signals measured.  The loop is bound by the
        # latency of predicted -> step -> next code, and a clamp to a constant cuts
        # that chain, so loud square waves are fast; full-scale noise (unpredictable
        # branches) and near silence (index clamped low every sample) are slowest.
        n = MAX_LEN
        kind = int(rng.integers(0, 3))
        if kind == 0:
            pcm = rng.integers(-32768, 32768, n)
        elif kind == 1:
            pcm = rng.normal(0.0, 2.0, n)
        else:
            pcm = rng.choice([-1, 1], n) * rng.integers(0, 32768, n)
        pcm = np.clip(pcm, -32768, 32767)
        valprev, index = int(rng.integers(-32768, 32768)), int(rng.integers(0, 89))
    else:
        r = rng.random()
        # a few empty and very short calls (the loop skipped / barely entered)
        n = (0 if r < 0.02 else int(rng.integers(1, 17)) if r < 0.1
             else int(rng.integers(1, MAX_LEN + 1)))
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 4))))
        bounds = np.concatenate(([0], cuts, [n]))
        parts = [_segment(rng, int(rng.integers(0, 5)), int(b - a))
                 for a, b in zip(bounds[:-1], bounds[1:])]
        pcm = np.clip(np.concatenate(parts) if parts else np.zeros(0), -32768, 32767)
        valprev, index = int(rng.integers(-32768, 32768)), int(rng.integers(0, 89))
    pcm = np.asarray(pcm, dtype=np.int16)
    ffi = ctx.ffi
    indata = ffi.new("short[]", max(n, 1))
    if n:
        ffi.memmove(indata, pcm.tobytes(), 2 * n)
    outdata = ffi.new("char[]", n // 2 + 1)
    # cffi maps C `char` to a 1-byte bytes object, not an int
    state = ffi.new("struct adpcm_state *", {"valprev": valprev, "index": bytes([index])})
    return (indata, outdata, n, state)
