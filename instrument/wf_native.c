/* wf_native.c — see wf_native.h. */
#include "wf_native.h"

int wf_native_abi(void) { return WF_NATIVE_ABI; }

uint64_t wf_rdtscp(uint32_t *aux)
{
    uint32_t lo, hi, c;
    __asm__ __volatile__("rdtscp" : "=a"(lo), "=d"(hi), "=c"(c) : : "memory");
    *aux = c;
    return ((uint64_t)hi << 32) | lo;
}
