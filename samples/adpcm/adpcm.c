/*
 * IMA ADPCM encoder: 16-bit PCM in, one 4-bit code per sample out (two per byte,
 * first sample in the high nibble).
 *
 * Each sample's code is a sign bit plus a 3-bit magnitude, the quantised difference
 * between the sample and the value the decoder will have reconstructed so far.  The
 * encoder tracks that reconstruction exactly as the decoder would, so both stay in
 * step.  The quantiser's step size adapts: large codes move up the step table, small
 * ones move down.
 *
 * Written for wcetfit as an analysis sample: a loop whose body holds the sign test,
 * three successive-approximation comparisons, two two-sided clamps (reconstruction
 * to 16 bits, table position to 0..88) and a nibble-packing toggle.
 */
#include "adpcm.h"

/*
 * gcc -O2 turns a bare clamp `if (v > hi) v = hi;` into a branch-free min/max (cmov).
 * The samples want the clamps as real, rarely taken blocks, as in the original
 * coder's compiled code, so each clamp arm passes its value through an empty
 * volatile asm statement: the compiler must keep it on that arm (a plain asm would
 * be hoisted out of the loop as invariant, and the arm if-converted again).
 * It emits no instruction.
 */
#define KEEP_BRANCH(v) __asm__ volatile("" : "+r"(v))

/* Change of table position for each 3-bit magnitude (the sign bit is ignored). */
static const signed char index_step[16] = {
    -1, -1, -1, -1, 2, 4, 6, 8,
    -1, -1, -1, -1, 2, 4, 6, 8,
};

/* The 89 quantiser step sizes of the IMA ADPCM standard (roughly x1.1 per entry). */
static const short step_table[89] = {
    7, 8, 9, 10, 11, 12, 13, 14, 16, 17,
    19, 21, 23, 25, 28, 31, 34, 37, 41, 45,
    50, 55, 60, 66, 73, 80, 88, 97, 107, 118,
    130, 143, 157, 173, 190, 209, 230, 253, 279, 307,
    337, 371, 408, 449, 494, 544, 598, 658, 724, 796,
    876, 963, 1060, 1166, 1282, 1411, 1552, 1707, 1878, 2066,
    2272, 2499, 2749, 3024, 3327, 3660, 4026, 4428, 4871, 5358,
    5894, 6484, 7132, 7845, 8630, 9493, 10442, 11487, 12635, 13899,
    15289, 16818, 18500, 20350, 22385, 24623, 27086, 29794, 32767,
};

void adpcm_coder(short *indata, char *outdata, int len, struct adpcm_state *state)
{
    int predicted = state->valprev;
    int position = state->index;
    int step = step_table[position];
    int high_pending = 0;     /* 1 when the high nibble of the next byte is filled */
    int packed = 0;           /* that pending byte */

    for (int i = 0; i < len; i++) {
        int diff = indata[i] - predicted;
        int code = 0;

        if (diff < 0) {
            code = 8;
            diff = -diff;
        }

        /* Successive approximation of diff/step in 3 bits; `delta` is what the
         * decoder will add for this code: step * (code & 7) / 4 + step / 8,
         * computed from the same shifted steps so it rounds identically. */
        int delta = step >> 3;
        if (diff >= step) {
            code |= 4;
            diff -= step;
            delta += step;
        }
        if (diff >= (step >> 1)) {
            code |= 2;
            diff -= step >> 1;
            delta += step >> 1;
        }
        if (diff >= (step >> 2)) {
            code |= 1;
            delta += step >> 2;
        }

        if (code & 8)
            predicted -= delta;
        else
            predicted += delta;

        /* the reconstruction is a 16-bit sample */
        if (predicted > 32767) {
            predicted = 32767;
            KEEP_BRANCH(predicted);
        } else if (predicted < -32768) {
            predicted = -32768;
            KEEP_BRANCH(predicted);
        }

        position += index_step[code];
        if (position < 0) {
            position = 0;
            KEEP_BRANCH(position);
        } else if (position > 88) {
            position = 88;
            KEEP_BRANCH(position);
        }
        step = step_table[position];

        if (high_pending) {
            *outdata++ = (char)(packed | code);
        } else {
            packed = code << 4;
        }
        high_pending = !high_pending;
    }

    /* an odd number of samples leaves a half-filled byte */
    if (high_pending)
        *outdata = (char)packed;

    state->valprev = (short)predicted;
    state->index = (char)position;
}
