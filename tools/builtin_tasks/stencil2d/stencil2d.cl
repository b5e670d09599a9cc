/* One Jacobi step of the 5-point Laplace stencil on a row-major [H, W] grid:
 *   out[i, j] = 0.25 * (in[i-1, j] + in[i+1, j] + in[i, j-1] + in[i, j+1])  for interior points,
 *   out[i, j] = in[i, j]                                                    on the boundary.
 * One grid point per work-item. */
__kernel void stencil2d(__global const float *in, __global float *out, const int H, const int W)
{
    const int j = get_global_id(0);
    const int i = get_global_id(1);
    if (i >= H || j >= W)
        return;
    const size_t c = (size_t)i * W + j;
    if (i == 0 || j == 0 || i == H - 1 || j == W - 1)
        out[c] = in[c];
    else
        out[c] = 0.25f * (in[c - W] + in[c + W] + in[c - 1] + in[c + 1]);
}
