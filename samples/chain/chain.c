/*
 * The solver's accuracy probe: per element of sel, one of four blocks runs, holding
 * a chain of 8, 16, 32 or 64 dependent 64-bit multiplies (ratio 1:2:4:8).
 *
 * Each chain is one inline-asm statement, so the compiler can neither fold,
 * reassociate nor vectorise it, nor merge the common tails of two chains into one
 * block (cross-jumping compares whole statements, and the four differ).  The value x
 * flows from one element's chain into the next, so chains never overlap in the
 * out-of-order core: a block's time is its chain's latency, proportional to the
 * chain's length.
 *
 *     x = x ^ sel[i];  x = x * MULT^L   (mod 2^64),  L = 8 << (sel[i] & 3)
 */

#define MULT 0x9E3779B97F4A7C15ull

#define IMUL1 "imul %1, %0\n\t"
#define IMUL4 IMUL1 IMUL1 IMUL1 IMUL1
#define IMUL8 IMUL4 IMUL4
#define IMUL16 IMUL8 IMUL8
#define IMUL32 IMUL16 IMUL16
#define IMUL64 IMUL32 IMUL32

unsigned long long chain_run(const unsigned char *sel, int n, unsigned long long x)
{
    const unsigned long long m = MULT;

    for (int i = 0; i < n; i++) {
        x ^= sel[i];
        switch (sel[i] & 3) {
        case 0:
            __asm__("# chain 8\n\t" IMUL8 : "+r"(x) : "r"(m));
            break;
        case 1:
            __asm__("# chain 16\n\t" IMUL16 : "+r"(x) : "r"(m));
            break;
        case 2:
            __asm__("# chain 32\n\t" IMUL32 : "+r"(x) : "r"(m));
            break;
        default:
            __asm__("# chain 64\n\t" IMUL64 : "+r"(x) : "r"(m));
            break;
        }
    }
    return x;
}
