/* wf_probe.c — see wf_probe.h. */
#include <string.h>

#include "wf_probe.h"
#include "wf_tsc.h"

#define WF_PROBE_ABI 1

/* The state's layout is also known to wcetfit.probe (offsets in the stubs). */
_Static_assert(offsetof(struct wf_probe_state, lo) == 0x04, "state layout");
_Static_assert(offsetof(struct wf_probe_state, aux) == 0x0c, "state layout");
_Static_assert(offsetof(struct wf_probe_state, nsites) == 0x10, "state layout");
_Static_assert(offsetof(struct wf_probe_state, saved_ret) == 0x18, "state layout");
_Static_assert(offsetof(struct wf_probe_state, slot) == 0x20, "state layout");
_Static_assert(offsetof(struct wf_probe_state, armed) == 0xa0, "state layout");

typedef int (*wf_plain_call)(void *fn, void *args, void *ret);

int wf_probe_abi(void) { return WF_PROBE_ABI; }
int wf_probe_state_size(void) { return (int)sizeof(struct wf_probe_state); }

static inline void wf_probe_prepare(const struct wf_probe_copy *r, int nr,
                                    volatile struct wf_probe_state *s)
{
    for (int i = 0; i < nr; i++)
        memcpy(r[i].dst, r[i].src, r[i].len);
    s->fired = 0;
    s->lo = s->hi = s->aux = 0;
    for (uint32_t k = 0; k < s->nsites; k++)
        s->slot[k] = s->armed[k];
}

/* The loop body per method: the stub writes *s during the call; `s` is volatile so
 * every read after the call reloads it, and the call itself is opaque to the compiler. */
#define WF_PROBE_CASE(ENUM, m)                                                       \
    case ENUM:                                                                       \
        for (int i = 0; i < repeats; i++) {                                          \
            uint32_t c0, c1;                                                         \
            wf_probe_prepare(restore, nr, s);                                        \
            uint64_t t0 = wf_tsc_start_##m(&c0);                                     \
            f(fn, args, ret);                                                        \
            uint64_t t1 = wf_tsc_stop_##m(&c1);                                      \
            t_start[i] = t0;                                                         \
            t_stop[i] = t1;                                                          \
            cpu_start[i] = c0;                                                       \
            cpu_stop[i] = c1;                                                        \
            t_probe[i] = s->fired ? (((uint64_t)s->hi << 32) | s->lo) : 0;           \
            cpu_probe[i] = s->aux;                                                   \
        }                                                                            \
        break;

int wf_probe_time(int method, void *call, void *fn, void *args, void *ret,
                  const struct wf_probe_copy *restore, int nr, void *state,
                  int warmup, int repeats,
                  uint64_t *t_start, uint64_t *t_stop, uint64_t *t_probe,
                  uint32_t *cpu_start, uint32_t *cpu_stop, uint32_t *cpu_probe)
{
    volatile struct wf_probe_state *s = (volatile struct wf_probe_state *)state;
    if (method < 0 || method >= WF_TSC_NMETHODS || !call || !fn || !state || warmup < 0 ||
        repeats < 0 || nr < 0 || (nr > 0 && !restore) ||
        (repeats > 0 && (!t_start || !t_stop || !t_probe || !cpu_start || !cpu_stop ||
                         !cpu_probe)) ||
        s->nsites > WF_PROBE_MAX_SITES)
        return -1;
    wf_plain_call f = (wf_plain_call)call;
    for (int w = 0; w < warmup; w++) {
        wf_probe_prepare(restore, nr, s);
        f(fn, args, ret);
    }
    switch (method) {
        WF_TSC_FOR_EACH_METHOD(WF_PROBE_CASE)
    default:
        return -1;
    }
    return 0;
}
