/* Naive 2-D convolution (valid region) of a row-major [H, W] image with a [KS, KS] filter:
 * out[i, j] = sum_{u,v} img[i + u, j + v] * filt[u, v] for i < H - KS + 1, j < W - KS + 1;
 * the output is [H, W] with zeros outside the valid region. One output per work-item, and the
 * partial sum lives in the output buffer. */
__kernel void conv2d(__global const float *img, __global const float *filt, __global float *out,
                     const int H, const int W, const int KS)
{
    const int j = get_global_id(0);
    const int i = get_global_id(1);
    out[i * W + j] = 0.0f;
    if (i > H - KS || j > W - KS)
        return;
    for (int u = 0; u < KS; ++u)
        for (int v = 0; v < KS; ++v)
            out[i * W + j] += img[(i + u) * W + j + v] * filt[u * KS + v];
}
