/*
 * FIR filter over 16-bit samples with Q15 taps:
 *     y[i] = sat16((sum_{k=0}^{min(i, taps-1)} h[k] * x[i-k]) >> 15)
 * Samples before x[0] count as zero (the sum is simply shorter near the start).
 *
 * Analysis sample: an outer loop over the n outputs, an inner loop whose trip count
 * min(i+1, taps) grows then stays constant (so its total varies with both n and
 * taps), and two saturation branches that only loud input with large gains reaches.
 */

/* Keeps a saturation arm a real (rarely taken) branch: without it gcc -O2 emits a
 * cmov.  An empty volatile asm stays on its arm and emits no instruction. */
#define KEEP_BRANCH(v) __asm__ volatile("" : "+r"(v))

void fir_filter(const short *x, int n, const short *h, int taps, short *y)
{
    for (int i = 0; i < n; i++) {
        int last = i < taps - 1 ? i : taps - 1;
        long acc = 0;
        for (int k = 0; k <= last; k++)
            acc += (long)h[k] * x[i - k];
        acc >>= 15;
        if (acc > 32767) {
            acc = 32767;
            KEEP_BRANCH(acc);
        } else if (acc < -32768) {
            acc = -32768;
            KEEP_BRANCH(acc);
        }
        y[i] = (short)acc;
    }
}
