/*
 * Calls of every kind from one measured function, calls_entry:
 *
 *   memcpy      imported from the C library (a call through this object's PLT)
 *   tree_sum    internal, recursive (both subtrees), depth bounded by TREE_MAX_DEPTH
 *   gcd_steps   internal, a loop whose trip count depends on the data
 *   calls_mix   exported by this library: default visibility makes it interposable,
 *               so even this object's own call to it goes through the PLT
 *
 * The internal helpers are noinline/noclone so that they stay real calls to functions
 * with their own names (no .constprop/.isra clones).
 */
#include <string.h>

#define TREE_MAX_DEPTH 9       /* levels of the tree walked; a heap of 256 nodes has 9 */

#define HELPER __attribute__((noinline, noclone))

/* A 32-bit integer mixer (xorshift-multiply rounds). */
unsigned calls_mix(unsigned x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/*
 * Sum of the heap-shaped tree stored in t[0..n): node i has children 2i+1 and 2i+2.
 * A negative node ends its branch (neither it nor its subtree counts), so the number
 * of calls depends on the data.  depth counts levels from 1 at the root.
 */
static HELPER long tree_sum(const int *t, int n, int i, int depth)
{
    if (i >= n || t[i] < 0 || depth > TREE_MAX_DEPTH)
        return 0;
    return t[i] + tree_sum(t, n, 2 * i + 1, depth + 1) + tree_sum(t, n, 2 * i + 2, depth + 1);
}

/* Euclid's algorithm; returns gcd(a, b) * 64 + the number of division steps. */
static HELPER unsigned gcd_steps(unsigned a, unsigned b)
{
    unsigned steps = 0;
    while (b != 0) {
        unsigned r = a % b;
        a = b;
        b = r;
        steps++;
    }
    return a * 64u + steps;
}

/*
 * Copies data[0..n) into work (which must hold n ints) and hashes the copy: the tree
 * sum, then one gcd per pair of elements, each mixed in through calls_mix.  The copy
 * goes to a caller's buffer of unknown size so that gcc keeps memcpy a library call
 * (into a bounded local array it expands memcpy inline as `rep movsq`).
 */
unsigned calls_entry(const int *data, int n, int *work)
{
    int *local = work;
    unsigned h;

    if (n <= 0)
        return 0;
    memcpy(local, data, (size_t)n * sizeof local[0]);

    h = (unsigned)tree_sum(local, n, 0, 1);
    for (int i = 0; i + 1 < n; i += 2) {
        unsigned a = local[i] < 0 ? 0u - (unsigned)local[i] : (unsigned)local[i];
        unsigned b = local[i + 1] < 0 ? 0u - (unsigned)local[i + 1] : (unsigned)local[i + 1];
        h = calls_mix(h ^ gcd_steps(a, b));
    }
    return h;
}
