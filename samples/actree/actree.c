/*
 * Nested activations for per-activation timing (wcetfit time --activations):
 *
 *   actree_run   the root: calls leaf_sum, middle, rec and tailer
 *   leaf_sum     a loop over n elements, called from three sites with different n
 *                (once from actree_run, twice from middle)
 *   middle       nested: calls leaf_sum on both halves of the array
 *   rec          recursive, two calls per level (a binary tree of activations)
 *   tailer       ends with a tail call of leaf_sum when n > 3 (a jmp, not a call)
 *   twice        too short to patch (`lea; ret`): not timed, its block stays in its
 *                callers' rows
 *
 * The helpers are noinline/noclone so that they stay calls to functions of their own.
 * rec combines its two calls with ^ so that gcc cannot turn either into a loop (its
 * tail-recursion pass accumulates only + and *).
 */
#define HELPER __attribute__((noinline, noclone))

static HELPER int twice(int x)
{
    return x * 2;
}

static HELPER int leaf_sum(const int *v, int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += (v[i] * 3) ^ i;
    return s;
}

static HELPER int middle(const int *v, int n)
{
    int a = leaf_sum(v, n / 2);
    int b = leaf_sum(v + n / 2, n - n / 2);
    return twice(a) - b;
}

static HELPER int rec(int depth, int x)
{
    if (depth <= 0)
        return twice(x & 7);
    return rec(depth - 1, x + 1) ^ (rec(depth - 2, x * 3) + 1);
}

static HELPER int tailer(const int *v, int n)
{
    if (n > 3)
        return leaf_sum(v, 3);
    return n;
}

int actree_run(const int *v, int n, int depth)
{
    int s = leaf_sum(v, n);
    s += middle(v, n);
    s += rec(depth, s);
    s += tailer(v, n);
    return s;
}
