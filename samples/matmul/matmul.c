/*
 * Square matrix product c = a * b, n x n, row-major ints.
 *
 * Analysis sample: a triple loop nest, every level n iterations per entry, so the
 * innermost block runs n^3 times; with n bounded by the inputs (n <= 16) the loop
 * bounds given in wcetfit.toml are exact.
 */

void matmul(const int *a, const int *b, int *c, int n)
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            int sum = 0;
            for (int k = 0; k < n; k++)
                sum += a[i * n + k] * b[k * n + j];
            c[i * n + j] = sum;
        }
    }
}
