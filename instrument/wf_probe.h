/* wf_probe.h — timing loop for block-boundary probes (wcetfit.probe, wcetfit.split).
 *
 * A probe moves one clock reading of a timed call into a stub that wcetfit.probe
 * writes next to the binary and patches into the original code (a 5-byte jmp at the
 * probe point, or in the tails of its predecessors).  The stub reads the TSC with the
 * same fence sequence as wf_tsc.h and stores it, together with the reading CPU's
 * TSC_AUX, in a small state block that this loop re-arms before every call.
 *
 * This loop is the whole-call harness of wcetfit.thunk with two differences:
 *   - it calls through the thunk's plain-call entry wf_call_F(fn, args, ret) instead of
 *     calling F directly, so one loop serves every prototype (fn is the probe wrapper,
 *     which calls the measured function);
 *   - it records the absolute start and stop readings and the stub's reading, so the
 *     caller can form stub - start (a stop probe) or stop - stub (a start probe).
 *
 * Per repeat, outside the timed region: restore the argument memory (memcpy of each
 * region), re-arm the probe (fired = 0, every dispatch slot = its armed value).  Then
 * start reading, the call, stop reading.  Warm-up calls (restored and re-armed too)
 * come first.  `method` is a value of enum wf_tsc_method; the reader pair is chosen
 * once, outside the loops.
 *
 * State block layout (the stubs address it RIP-relative; wcetfit.probe writes `armed`
 * and `nsites`):
 *     0x00 uint32 fired       set to 1 by the stub that read the clock
 *     0x04 uint32 lo, hi      the stub's TSC reading (EDX:EAX)
 *     0x0c uint32 aux         TSC_AUX of the stub's reading
 *     0x10 uint32 nsites      number of dispatch slots in use (<= WF_PROBE_MAX_SITES)
 *     0x18 uint64 saved_ret   the wrapper's parking place for the caller's return address
 *     0x20 uint64 slot[16]    each stub's indirect-jump target
 *     0xa0 uint64 armed[16]   the slot values that lead to the reading path
 *
 * Returns 0, or -1 on a bad argument.  t_probe[i] = 0 when the probe did not fire.
 */
#ifndef WF_PROBE_H
#define WF_PROBE_H

#include <stddef.h>
#include <stdint.h>

#define WF_PROBE_MAX_SITES 16

struct wf_probe_state {
    uint32_t fired;
    uint32_t lo;
    uint32_t hi;
    uint32_t aux;
    uint32_t nsites;
    uint32_t pad;
    uint64_t saved_ret;
    uint64_t slot[WF_PROBE_MAX_SITES];
    uint64_t armed[WF_PROBE_MAX_SITES];
};

/* cdef-begin */
/* Layout of one argument-memory copy: the same as wcetfit.thunk's struct wf_restore. */
struct wf_probe_copy { void *dst; const void *src; size_t len; };

int wf_probe_abi(void);
int wf_probe_state_size(void);

int wf_probe_time(int method, void *call, void *fn, void *args, void *ret,
                  const struct wf_probe_copy *restore, int nr, void *state,
                  int warmup, int repeats,
                  uint64_t *t_start, uint64_t *t_stop, uint64_t *t_probe,
                  uint32_t *cpu_start, uint32_t *cpu_stop, uint32_t *cpu_probe);
/* cdef-end */

#endif
