/*
 * Driver for the PIE-executable variant of the adpcm sample: encodes a synthetic
 * chirp and prints a checksum of the codes.  wcetfit loads the executable like a
 * shared object and measures adpcm_coder in it; main itself is never analysed.
 */
#include <stdio.h>

#include "adpcm.h"

#define SAMPLES 1024

int main(void)
{
    static short pcm[SAMPLES];
    static char codes[SAMPLES / 2];
    struct adpcm_state state = {0, 0};
    unsigned phase = 0, rate = 40, sum = 0;

    /* triangle chirp: rising frequency, full scale, no libm needed */
    for (int i = 0; i < SAMPLES; i++) {
        phase += rate;
        rate += 3;
        int t = (int)(phase & 0xffff);
        pcm[i] = (short)((t < 0x8000 ? t : 0xffff - t) * 2 - 0x8000);
    }
    adpcm_coder(pcm, codes, SAMPLES, &state);
    for (int i = 0; i < SAMPLES / 2; i++)
        sum = sum * 31u + (unsigned char)codes[i];
    printf("adpcm: %d samples, checksum %08x, final valprev %d index %d\n",
           SAMPLES, sum, state.valprev, state.index);
    return 0;
}
