/* wf_native.h — the native core of wcetfit, built by cffi as wcetfit._native.
 *
 * Everything Python reaches directly is declared here, between the cdef markers
 * (instrument/build_native.py feeds the marked part of every instrument/*.h to cffi,
 * so that part holds plain declarations only: no macros, no inline bodies).
 * Python and C exchange integers, arrays and structs, never text.
 *
 * Conventions of the timing kernels below
 * ---------------------------------------
 *   method         a value of enum wf_tsc_method (wf_tsc.h); anything else: return -1.
 *   ticks[i]       stop - start of sample i, TSC ticks (unsigned difference).
 *   cpu_start[i],  TSC_AUX read with the start / stop reading of sample i (Linux: CPU
 *   cpu_stop[i]    number in the low 12 bits).  Differing values = migrated sample;
 *                  the kernels record them, Python discards them.
 *   warm-up        WF_WARMUP_READS (default 3, as Paoloni) reader pairs before the first
 *                  recorded sample, so the readers' code is in the caches.
 *   return         0 on success, -1 on a bad argument (or -errno for system calls).
 *
 * The kernels do not pin: pin first (wf_pin_cpu) so the samples come from one counter.
 */
#ifndef WF_NATIVE_H
#define WF_NATIVE_H

#include <stdint.h>

/* Bumped whenever a declaration below changes, so a stale build is detected at import.
 * 2: TSC kernels, affinity, enum wf_tsc_method (wf_tsc.h). */
#define WF_NATIVE_ABI 2

/* cdef-begin */
int wf_native_abi(void);

/* One RDTSCP reading: ticks, and the CPU's TSC_AUX in *aux. */
uint64_t wf_rdtscp(uint32_t *aux);

/* Paoloni's empty-region ensembles: n_ensembles * ensemble_size samples of an empty
 * region, in ensemble-major order (sample i of ensemble e at e*ensemble_size + i). */
int wf_tsc_empty(int method, int n_ensembles, int ensemble_size,
                 uint64_t *ticks, uint32_t *cpu_start, uint32_t *cpu_stop);

/* Paoloni's resolution test: for each j < n_k, `repeats` samples of a region holding a
 * dependent loop of iters[j] iterations (one DEC/JNZ pair each; 0 = empty loop); sample
 * r of step j at j*repeats + r.  Unlike Paoloni (steps outer, repeats inner) the steps
 * are interleaved: round r takes one sample of every step, so a slow drift of the core
 * clock (a VM host changing frequency) shifts every step alike instead of bending the
 * staircase of minima. */
int wf_tsc_resolution(int method, const uint32_t *iters, int n_k, int repeats,
                      uint64_t *ticks, uint32_t *cpu_start, uint32_t *cpu_stop);

/* n+1 back-to-back LFENCE;RDTSC readings; deltas[i] = reading[i+1] - reading[i].
 * The smallest nonzero delta is the counter's quantum (its update step). */
int wf_tsc_steps(int n, uint64_t *deltas);

/* TSC rate against a POSIX clock (Etsion & Feitelson): reads the clock bracketed by two
 * RDTSCPs (the tightest of a few brackets) at the start, busy-waits duration_ns on that
 * clock, brackets again.  *ticks and *ns receive the two spans.  Returns 0, -1 on bad
 * arguments, -2 when the two brackets ran on different CPUs (retry pinned). */
int wf_tsc_calibrate(int clock_id, int64_t duration_ns, uint64_t *ticks, int64_t *ns);

/* Affinity of the calling thread (sched_setaffinity(0, ...)); masks are arrays of
 * 64-bit words, CPU c is bit c%64 of word c/64. */
int wf_pin_cpu(int cpu);                               /* 0 or -errno */
int wf_get_affinity(uint64_t *mask, int nwords);       /* CPUs allowed, or -errno */
int wf_set_affinity(const uint64_t *mask, int nwords); /* 0 or -errno */
int wf_pinned_cpu(void);  /* the one CPU the thread may run on, -1 if several */
int wf_current_cpu(void); /* sched_getcpu(), -errno on failure */
/* cdef-end */

#endif
