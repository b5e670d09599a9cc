/* Inclusive prefix sum of N ints: out[i] = x[0] + ... + x[i].
 * One work-item per output element, each summing its whole prefix again: O(N^2) work. */
__kernel void scan(__global const int *x, __global int *out, const int N)
{
    const int i = get_global_id(0);
    if (i < N) {
        int acc = 0;
        for (int j = 0; j <= i; ++j)
            acc += x[j];
        out[i] = acc;
    }
}
