/* wf_tsc.h — fenced readers of the time-stamp counter (x86-64, GCC/Clang inline asm).
 *
 * Included by wf_native.c (calibration kernels) and by every per-prototype call harness
 * that wcetfit.thunk generates, so that both measure with the very same instruction
 * sequences.  Everything here is `static inline`: no symbol is exported; only the enum
 * between the cdef markers is handed to cffi (instrument/build_native.py).
 *
 * A region is timed as
 *
 *     t0 = wf_tsc_start_<m>(&cpu0);   ...code under test...   t1 = wf_tsc_stop_<m>(&cpu1);
 *
 * and t1 - t0 is in TSC ticks: the TSC runs at a fixed rate (constant_tsc), which is
 * not the core clock, so ticks are never "core cycles".  Each reader also returns the
 * reading CPU's TSC_AUX (IA32_TSC_AUX, read by RDTSCP); Linux stores
 * (NUMA node << 12) | cpu number there, so the CPU is `aux & WF_TSC_AUX_CPU_MASK`.
 * A sample whose start and stop TSC_AUX differ ran on two CPUs (migrated) and compares
 * two different counters: callers discard it.
 *
 * Settings (nanoBench style: each setting, its default, and why)
 * ---------------------------------------------------------------
 *   method            default WF_TSC_LFENCE   Chosen per machine by `wcetfit calibrate`
 *                                             (Paoloni's validation); see the enum below.
 *   WF_TSC_CPUID_LEAF default 0               CPUID leaf used as the serializer.  Paoloni
 *                                             leaves EAX unset, which makes the cost depend
 *                                             on whatever EAX held; a fixed leaf makes it
 *                                             repeatable.  Leaf 0 is valid on every CPU.
 *   WF_TSC_AUX_CPU_MASK default 0xfff         Low 12 bits of TSC_AUX = CPU number on Linux.
 *
 * Clobbers.  RDTSC writes EDX:EAX, RDTSCP writes EDX:EAX and ECX, CPUID writes EAX, EBX,
 * ECX and EDX (the upper halves of the 64-bit registers are cleared).  Registers that are
 * outputs are declared as outputs; those written but not returned are clobbered.  Every
 * reader also clobbers "memory" so the compiler neither caches memory values across the
 * reading nor moves loads/stores of the code under test out of (or into) the region, and
 * every asm is volatile so it is neither deleted nor merged nor hoisted out of a loop.
 * Register-only computations can still be moved by the compiler across an asm; the
 * harness therefore keeps only a call (which the compiler treats as touching memory)
 * between the readings.
 */
#ifndef WF_TSC_H
#define WF_TSC_H

#include <stdint.h>

#ifndef WF_TSC_CPUID_LEAF
#define WF_TSC_CPUID_LEAF 0u
#endif
#define WF_TSC_AUX_CPU_MASK 0xfffu

/* cdef-begin */
/* The fence methods.  Numbers are part of the native ABI (WF_NATIVE_ABI). */
enum wf_tsc_method {
    /* start: LFENCE; RDTSC; LFENCE      stop: RDTSCP; LFENCE
     * The first LFENCE waits for earlier instructions (argument set-up) to complete, the
     * second keeps the measured code from starting before the read; RDTSCP waits for the
     * measured code to complete and the final LFENCE keeps later code out.  Cheap (no VM
     * exit), the recommended method where LFENCE is dispatch-serializing (Intel; AMD with
     * the LFENCE-serializing MSR bit Linux sets). */
    WF_TSC_LFENCE = 0,
    /* start: CPUID; RDTSC                stop: RDTSCP; CPUID
     * Paoloni 2010, section 3.2.1: CPUID is fully serializing, but under a hypervisor it is
     * intercepted (a VM exit of ~10^4 ticks), which only stays outside the region because
     * the start CPUID precedes and the stop CPUID follows the readings. */
    WF_TSC_CPUID = 1,
    /* start: RDTSCP                      stop: RDTSCP
     * No fence: RDTSCP waits for earlier instructions but later ones may start before it
     * reads, so the start of the measured code can leak in front of the first reading. */
    WF_TSC_RDTSCP = 2,
    /* start: MFENCE; LFENCE; RDTSC; LFENCE   stop: MFENCE; RDTSCP; LFENCE
     * Like LFENCE, but the start also drains stores still buffered from before the region
     * (the argument restore's memcpy) so they are not charged to the code under test, and
     * the stop drains the measured code's own stores so they are.  Costs two MFENCEs. */
    WF_TSC_MFENCE = 3,
    /* start: CPUID; RDTSC                stop: CPUID; RDTSC
     * Paoloni 2010, section 3.1, kept as the negative reference of the validation: the
     * stop CPUID sits inside the region, so its cost and jitter (a VM exit under a
     * hypervisor) are measured too.  Never a sensible choice for measuring code. */
    WF_TSC_CPUID_INSIDE = 4,
    WF_TSC_NMETHODS = 5
};
/* cdef-end */

/* TSC_AUX of the current CPU without keeping the counter (RDTSCP also returns it). */
static inline uint32_t wf_tsc_aux(void)
{
    uint32_t lo, hi, aux;
    __asm__ __volatile__("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux) : : "memory");
    (void)lo;
    (void)hi;
    return aux;
}

/* ---- WF_TSC_LFENCE ---------------------------------------------------------------- */

static inline uint64_t wf_tsc_start_lfence(uint32_t *aux)
{
    uint32_t lo, hi;
    *aux = wf_tsc_aux(); /* before the fence: outside the region */
    __asm__ __volatile__("lfence\n\t"
                         "rdtsc\n\t"
                         "lfence"
                         : "=a"(lo), "=d"(hi)
                         :
                         : "memory");
    return ((uint64_t)hi << 32) | lo;
}

static inline uint64_t wf_tsc_stop_lfence(uint32_t *aux)
{
    uint32_t lo, hi, c;
    __asm__ __volatile__("rdtscp\n\t"
                         "lfence"
                         : "=a"(lo), "=d"(hi), "=c"(c)
                         :
                         : "memory");
    *aux = c;
    return ((uint64_t)hi << 32) | lo;
}

/* ---- WF_TSC_CPUID (Paoloni) ------------------------------------------------------- */

/* CPUID then RDTSC: the reading waits for every earlier instruction.  CPUID takes the
 * leaf in EAX (sub-leaf ECX) and overwrites EAX..EDX; RDTSC then rewrites EDX:EAX with the
 * counter.  All four are operands, none is left unnamed. */
static inline uint64_t wf_tsc_cpuid_rdtsc(void)
{
    uint32_t a = WF_TSC_CPUID_LEAF, b, c = 0, d;
    __asm__ __volatile__("cpuid\n\t"
                         "rdtsc"
                         : "+a"(a), "=b"(b), "+c"(c), "=d"(d)
                         :
                         : "memory");
    (void)b;
    (void)c;
    return ((uint64_t)d << 32) | a;
}

static inline uint64_t wf_tsc_start_cpuid(uint32_t *aux)
{
    *aux = wf_tsc_aux();
    return wf_tsc_cpuid_rdtsc();
}

static inline uint64_t wf_tsc_stop_cpuid(uint32_t *aux)
{
    uint32_t lo, hi, c;
    /* The counter and TSC_AUX are copied out of EAX/EDX/ECX before CPUID overwrites them;
     * the compiler picks the destination registers among those not clobbered. */
    __asm__ __volatile__("rdtscp\n\t"
                         "mov %%eax, %0\n\t"
                         "mov %%edx, %1\n\t"
                         "mov %%ecx, %2\n\t"
                         "mov %3, %%eax\n\t"
                         "xor %%ecx, %%ecx\n\t"
                         "cpuid"
                         : "=&r"(lo), "=&r"(hi), "=&r"(c)
                         : "i"(WF_TSC_CPUID_LEAF)
                         : "rax", "rbx", "rcx", "rdx", "memory");
    *aux = c;
    return ((uint64_t)hi << 32) | lo;
}

/* ---- WF_TSC_RDTSCP (unfenced) ----------------------------------------------------- */

static inline uint64_t wf_tsc_start_rdtscp(uint32_t *aux)
{
    uint32_t lo, hi, c;
    __asm__ __volatile__("rdtscp" : "=a"(lo), "=d"(hi), "=c"(c) : : "memory");
    *aux = c;
    return ((uint64_t)hi << 32) | lo;
}

static inline uint64_t wf_tsc_stop_rdtscp(uint32_t *aux)
{
    uint32_t lo, hi, c;
    __asm__ __volatile__("rdtscp" : "=a"(lo), "=d"(hi), "=c"(c) : : "memory");
    *aux = c;
    return ((uint64_t)hi << 32) | lo;
}

/* ---- WF_TSC_MFENCE ---------------------------------------------------------------- */

static inline uint64_t wf_tsc_start_mfence(uint32_t *aux)
{
    uint32_t lo, hi;
    *aux = wf_tsc_aux();
    __asm__ __volatile__("mfence\n\t"
                         "lfence\n\t"
                         "rdtsc\n\t"
                         "lfence"
                         : "=a"(lo), "=d"(hi)
                         :
                         : "memory");
    return ((uint64_t)hi << 32) | lo;
}

static inline uint64_t wf_tsc_stop_mfence(uint32_t *aux)
{
    uint32_t lo, hi, c;
    __asm__ __volatile__("mfence\n\t"
                         "rdtscp\n\t"
                         "lfence"
                         : "=a"(lo), "=d"(hi), "=c"(c)
                         :
                         : "memory");
    *aux = c;
    return ((uint64_t)hi << 32) | lo;
}

/* ---- WF_TSC_CPUID_INSIDE (Paoloni's first method) --------------------------------- */

static inline uint64_t wf_tsc_start_cpuid_inside(uint32_t *aux)
{
    return wf_tsc_start_cpuid(aux);
}

static inline uint64_t wf_tsc_stop_cpuid_inside(uint32_t *aux)
{
    uint64_t t = wf_tsc_cpuid_rdtsc();
    *aux = wf_tsc_aux(); /* after the reading: outside the region */
    return t;
}

/* ---- back-to-back readings (quantum) ---------------------------------------------- */

/* One LFENCE-ordered RDTSC, for measuring the counter's step: no TSC_AUX. */
static inline uint64_t wf_tsc_read_ordered(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("lfence\n\t"
                         "rdtsc"
                         : "=a"(lo), "=d"(hi)
                         :
                         : "memory");
    return ((uint64_t)hi << 32) | lo;
}

/* ---- dispatch helpers for generated code ------------------------------------------ *
 * WF_TSC_FOR_EACH_METHOD(X) expands X(ENUM, suffix) once per method, so C written with
 * it (calibration kernels, generated harnesses) selects the method outside the timed
 * loop and the loop body inlines one reader pair with no branch inside the region. */
#define WF_TSC_FOR_EACH_METHOD(X) \
    X(WF_TSC_LFENCE, lfence)      \
    X(WF_TSC_CPUID, cpuid)        \
    X(WF_TSC_RDTSCP, rdtscp)      \
    X(WF_TSC_MFENCE, mfence)      \
    X(WF_TSC_CPUID_INSIDE, cpuid_inside)

#endif
