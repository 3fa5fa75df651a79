/* wf_native.h — the native core of wcetfit, built by cffi as wcetfit._native.
 *
 * Everything Python reaches directly is declared here (instrument/build_native.py feeds
 * this header's declarations to cffi).  Python and C exchange integers, arrays and
 * structs, never text.
 */
#ifndef WF_NATIVE_H
#define WF_NATIVE_H

#include <stdint.h>

/* Bumped whenever a declaration below changes, so a stale build is detected at import. */
#define WF_NATIVE_ABI 1
int wf_native_abi(void);

/* One RDTSCP reading: ticks, and the CPU's TSC_AUX (Linux stores the CPU number in
 * its low 12 bits) in *aux. */
uint64_t wf_rdtscp(uint32_t *aux);

#endif
