/* wf_native.c — see wf_native.h.  Settings are documented beside their defaults in
 * wf_native.h and wf_tsc.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "wf_native.h"
#include "wf_tsc.h"

/* Reader pairs executed before the first recorded sample (Paoloni's cache warm-up). */
#ifndef WF_WARMUP_READS
#define WF_WARMUP_READS 3
#endif

/* Brackets tried at each end of a frequency calibration; the tightest is kept. */
#ifndef WF_CAL_BRACKETS
#define WF_CAL_BRACKETS 8
#endif

int wf_native_abi(void) { return WF_NATIVE_ABI; }

uint64_t wf_rdtscp(uint32_t *aux)
{
    uint32_t lo, hi, c;
    __asm__ __volatile__("rdtscp" : "=a"(lo), "=d"(hi), "=c"(c) : : "memory");
    *aux = c;
    return ((uint64_t)hi << 32) | lo;
}

/* ---- empty-region ensembles ------------------------------------------------------- */

#define WF_EMPTY_CASE(ENUM, m)                                              \
    case ENUM:                                                              \
        for (int w = 0; w < WF_WARMUP_READS; w++) {                         \
            uint32_t c0, c1;                                                \
            uint64_t t0 = wf_tsc_start_##m(&c0);                            \
            uint64_t t1 = wf_tsc_stop_##m(&c1);                             \
            (void)t0;                                                       \
            (void)t1;                                                       \
        }                                                                   \
        for (long i = 0; i < n; i++) {                                      \
            uint32_t c0, c1;                                                \
            uint64_t t0 = wf_tsc_start_##m(&c0);                            \
            uint64_t t1 = wf_tsc_stop_##m(&c1);                             \
            ticks[i] = t1 - t0;                                             \
            cpu_start[i] = c0;                                              \
            cpu_stop[i] = c1;                                               \
        }                                                                   \
        return 0;

int wf_tsc_empty(int method, int n_ensembles, int ensemble_size,
                 uint64_t *ticks, uint32_t *cpu_start, uint32_t *cpu_stop)
{
    if (n_ensembles < 0 || ensemble_size < 0 || !ticks || !cpu_start || !cpu_stop)
        return -1;
    /* The ensembles are contiguous: one flat loop keeps the region's surroundings
     * identical for every sample; Python reshapes. */
    long n = (long)n_ensembles * (long)ensemble_size;
    switch (method) {
        WF_TSC_FOR_EACH_METHOD(WF_EMPTY_CASE)
    default:
        return -1;
    }
}

/* ---- resolution test -------------------------------------------------------------- */

/* A dependent loop of n iterations: each DEC needs the previous one's result, so the
 * iterations cannot overlap; the asm keeps the compiler from folding it. */
static inline void wf_spin(uint32_t n)
{
    __asm__ __volatile__("test %0, %0\n\t"
                         "jz 2f\n"
                         "1:\n\t"
                         "dec %0\n\t"
                         "jnz 1b\n"
                         "2:"
                         : "+r"(n)
                         :
                         : "cc");
}

#define WF_RESOLUTION_CASE(ENUM, m)                                         \
    case ENUM:                                                              \
        for (int w = 0; w < WF_WARMUP_READS; w++) {                         \
            uint32_t c0, c1;                                                \
            uint64_t t0 = wf_tsc_start_##m(&c0);                            \
            wf_spin(iters[0]);                                              \
            uint64_t t1 = wf_tsc_stop_##m(&c1);                             \
            (void)t0;                                                       \
            (void)t1;                                                       \
        }                                                                   \
        for (int r = 0; r < repeats; r++) {                                 \
            for (int j = 0; j < n_k; j++) {                                 \
                uint32_t k = iters[j];                                      \
                long at = (long)j * repeats + r;                            \
                uint32_t c0, c1;                                            \
                uint64_t t0 = wf_tsc_start_##m(&c0);                        \
                wf_spin(k);                                                 \
                uint64_t t1 = wf_tsc_stop_##m(&c1);                         \
                ticks[at] = t1 - t0;                                        \
                cpu_start[at] = c0;                                         \
                cpu_stop[at] = c1;                                          \
            }                                                               \
        }                                                                   \
        return 0;

int wf_tsc_resolution(int method, const uint32_t *iters, int n_k, int repeats,
                      uint64_t *ticks, uint32_t *cpu_start, uint32_t *cpu_stop)
{
    if (n_k <= 0 || repeats < 0 || !iters || !ticks || !cpu_start || !cpu_stop)
        return -1;
    switch (method) {
        WF_TSC_FOR_EACH_METHOD(WF_RESOLUTION_CASE)
    default:
        return -1;
    }
}

/* ---- quantum ---------------------------------------------------------------------- */

int wf_tsc_steps(int n, uint64_t *deltas)
{
    if (n <= 0 || !deltas)
        return -1;
    uint64_t prev = wf_tsc_read_ordered();
    for (int i = 0; i < n; i++) {
        uint64_t now = wf_tsc_read_ordered();
        deltas[i] = now - prev;
        prev = now;
    }
    return 0;
}

/* ---- frequency against a POSIX clock ---------------------------------------------- */

static int64_t wf_ts_ns(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

/* The clock read between two RDTSCPs; the TSC value attributed to it is the middle of
 * the tightest bracket found, so the error is at most half that bracket. */
static int wf_bracket(clockid_t clk, uint64_t *tsc, int64_t *ns, uint32_t *aux)
{
    uint64_t best_width = UINT64_MAX;
    for (int i = 0; i < WF_CAL_BRACKETS; i++) {
        struct timespec ts;
        uint32_t a0, a1;
        uint64_t t0 = wf_rdtscp(&a0);
        if (clock_gettime(clk, &ts) != 0)
            return -1;
        uint64_t t1 = wf_rdtscp(&a1);
        if (a0 != a1)
            continue;
        if (t1 - t0 < best_width) {
            best_width = t1 - t0;
            *tsc = t0 + (t1 - t0) / 2;
            *ns = wf_ts_ns(&ts);
            *aux = a0;
        }
    }
    return best_width == UINT64_MAX ? -2 : 0;
}

int wf_tsc_calibrate(int clock_id, int64_t duration_ns, uint64_t *ticks, int64_t *ns)
{
    if (duration_ns <= 0 || !ticks || !ns)
        return -1;
    clockid_t clk = (clockid_t)clock_id;
    uint64_t tsc0, tsc1;
    int64_t ns0, ns1;
    uint32_t aux0, aux1;
    int rc = wf_bracket(clk, &tsc0, &ns0, &aux0);
    if (rc)
        return rc;
    /* Busy-wait rather than sleep: a sleeping thread may wake on another CPU. */
    struct timespec ts;
    do {
        if (clock_gettime(clk, &ts) != 0)
            return -1;
    } while (wf_ts_ns(&ts) - ns0 < duration_ns);
    rc = wf_bracket(clk, &tsc1, &ns1, &aux1);
    if (rc)
        return rc;
    if ((aux0 & WF_TSC_AUX_CPU_MASK) != (aux1 & WF_TSC_AUX_CPU_MASK))
        return -2;
    *ticks = tsc1 - tsc0;
    *ns = ns1 - ns0;
    return 0;
}

/* ---- affinity --------------------------------------------------------------------- */

int wf_pin_cpu(int cpu)
{
    if (cpu < 0 || cpu >= CPU_SETSIZE)
        return -EINVAL;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : -errno;
}

int wf_get_affinity(uint64_t *mask, int nwords)
{
    if (!mask || nwords <= 0)
        return -EINVAL;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -errno;
    memset(mask, 0, (size_t)nwords * sizeof *mask);
    int count = 0;
    for (int c = 0; c < CPU_SETSIZE && c < nwords * 64; c++) {
        if (CPU_ISSET(c, &set)) {
            mask[c / 64] |= (uint64_t)1 << (c % 64);
            count++;
        }
    }
    return count;
}

int wf_set_affinity(const uint64_t *mask, int nwords)
{
    if (!mask || nwords <= 0)
        return -EINVAL;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c = 0; c < CPU_SETSIZE && c < nwords * 64; c++)
        if (mask[c / 64] >> (c % 64) & 1)
            CPU_SET(c, &set);
    if (CPU_COUNT(&set) == 0)
        return -EINVAL;
    return sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : -errno;
}

int wf_pinned_cpu(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    if (CPU_COUNT(&set) != 1)
        return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            return c;
    return -1;
}

int wf_current_cpu(void)
{
    int c = sched_getcpu();
    return c >= 0 ? c : -errno;
}
