/*
 * Insertion sort of an int array, ascending, in place.
 *
 * Analysis sample: the outer loop runs n-1 times whatever the data; the inner
 * (shifting) loop runs once per inversion, so its count varies independently of n
 * from 0 (sorted input) to n(n-1)/2 (reversed input).
 */

void isort(int *a, int n)
{
    for (int i = 1; i < n; i++) {
        int key = a[i];
        int j = i - 1;
        while (j >= 0 && a[j] > key) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = key;
    }
}
