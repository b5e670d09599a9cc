/* 2-D convolution (valid region) of a row-major [H, W] image with a 5x5 filter:
 * out[i, j] = sum_{u,v} img[i + u, j + v] * filt[u * 5 + v] for i <= H - 5, j <= W - 5, else 0.
 * One output per work-item, the sum in a register. */
#define KS 5
__kernel void conv2d(__global const float *img, __global const float *filt, __global float *out,
                     const int H, const int W)
{
    const int j = get_global_id(0);
    const int i = get_global_id(1);
    float acc = 0.0f;
    if (i <= H - KS && j <= W - KS)
        for (int u = 0; u < KS; ++u)
            for (int v = 0; v < KS; ++v)
                acc += img[(i + u) * W + j + v] * filt[u * KS + v];
    out[i * W + j] = acc;
}
