/* IMA ADPCM encoder state, shared by the library and the PIE driver. */
#ifndef WCETFIT_SAMPLE_ADPCM_H
#define WCETFIT_SAMPLE_ADPCM_H

struct adpcm_state {
    short valprev;   /* the decoder's reconstruction of the previous sample */
    char index;      /* position in the step-size table, 0..88 */
};

void adpcm_coder(short *indata, char *outdata, int len, struct adpcm_state *state);

#endif
