/*
 * Binary search in an ascending int array: the index of an element equal to key,
 * or -1.  (Named bsearch_int so as not to clash with the C library's bsearch.)
 *
 * Analysis sample: a loop of at most floor(log2(n)) + 1 iterations with a three-way
 * comparison whose "found" arm leaves the loop early.  One call is short (tens of
 * nanoseconds), so this sample also probes the timing floor.
 */

int bsearch_int(const int *a, int n, int key)
{
    int lo = 0, hi = n - 1;

    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int v = a[mid];
        if (v < key)
            lo = mid + 1;
        else if (v > key)
            hi = mid - 1;
        else
            return mid;
    }
    return -1;
}
