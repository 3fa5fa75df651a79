/*
 * Calls through function pointers from one measured function, dispatch_run:
 *
 *   ops[k](acc, x)     a table of this library's own functions, called indirectly
 *                      (`call *…`) once per program byte; op_mix has a loop of its own
 *   finishers[k](acc)  the last call, in tail position: `jmp *%rax` through a pointer
 *   ext_abs(acc)       a pointer to the C library's labs, outside this library
 *
 * The operations are noinline/noclone so each stays a real function with its own name.
 */
#include <stdlib.h>

#define HELPER __attribute__((noinline, noclone))

typedef long (*op_fn)(long acc, long x);
typedef long (*fin_fn)(long acc);

static HELPER long op_add(long acc, long x) { return acc + x; }
static HELPER long op_xor(long acc, long x) { return acc ^ (x * 0x9e3779b1L); }

/* x & 15 rounds of a multiply-add: the callee's own loop, data dependent. */
static HELPER long op_mix(long acc, long x)
{
    for (long i = 0; i < (x & 15); i++)
        acc = acc * 31 + i;
    return acc;
}

static HELPER long op_rot(long acc, long x)
{
    unsigned long u = (unsigned long)acc;
    int r = (int)(x & 63);
    return (long)(r ? (u << r) | (u >> (64 - r)) : u);
}

static HELPER long fin_even(long acc) { return acc / 2; }
static HELPER long fin_odd(long acc) { return acc * 3 + 1; }

static op_fn const ops[4] = { op_add, op_xor, op_mix, op_rot };
static fin_fn const finishers[2] = { fin_even, fin_odd };
/* volatile: keeps gcc from calling labs directly */
static long (*volatile ext_abs)(long) = labs;

/* Runs the program prog[0..n): byte b applies ops[b & 3] with operand b >> 2, and
 * the byte 255 also takes the absolute value through libc; ends in a finisher. */
long dispatch_run(const unsigned char *prog, int n, long acc)
{
    for (int i = 0; i < n; i++) {
        acc = ops[prog[i] & 3](acc, prog[i] >> 2);
        if (prog[i] == 255)
            acc = ext_abs(acc);
    }
    return finishers[acc & 1](acc);
}
