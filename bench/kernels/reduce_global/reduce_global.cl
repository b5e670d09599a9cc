/* Column sums of a row-major [R, C] matrix: work-item c adds the rows of column c into out[c] directly,
 * a global read and write per row; a helper kernel in the same file zeroes a buffer (never the entry). */
__kernel void zero(__global float *v, const int n)
{
    const int i = get_global_id(0);
    if (i < n)
        v[i] = 0.0f;
}

__kernel void colsum(__global const float *a, __global float *out, const int R, const int C)
{
    const int c = get_global_id(0);
    out[c] = 0.0f;
    for (int r = 0; r < R; ++r)
        out[c] = out[c] + a[r * C + c];
}
