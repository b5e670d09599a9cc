/* 5x5 convolution, register-blocked and optionally tiled through local memory.
 *   WGX, WGY  work-group size (work-items along x and y)
 *   TX, TY    outputs per work-item along x (consecutive) and y; each input row segment of TX + 4 values
 *             is loaded once into registers and used by every output row and filter row it touches
 *   LOCAL     1: the work-group first stages its (WGY*TY + 4) x (WGX*TX + 4) input tile in local memory
 * Geometry: global = (W / TX, H / TY), local = (WGX, WGY); the constraints make the tiles divide W and H.
 * Sums run in the reference's order (filter row, then column), so results match it closely.
 */
#define KS 5
#define SEG (TX + KS - 1)

__kernel __attribute__((reqd_work_group_size(WGX, WGY, 1)))
void conv2d(__global const float *img, __global const float *filt, __global float *out, const int H, const int W)
{
    const int x0 = get_global_id(0) * TX;
    const int y0 = get_global_id(1) * TY;
#if LOCAL
    #define TW (WGX * TX + KS - 1)
    #define TH (WGY * TY + KS - 1)
    __local float tile[TH * TW];
    const int bx = get_group_id(0) * WGX * TX;
    const int by = get_group_id(1) * WGY * TY;
    for (int r = get_local_id(1); r < TH; r += WGY)
        for (int c = get_local_id(0); c < TW; c += WGX) {
            const int gy = by + r, gx = bx + c;
            tile[r * TW + c] = (gy < H && gx < W) ? img[gy * W + gx] : 0.0f;
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    #define IN(yy, xx) tile[((yy) - by) * TW + (xx) - bx]
#else
    #define IN(yy, xx) img[(yy) * W + (xx)]
#endif
    float acc[TY][TX];
    #pragma unroll
    for (int oy = 0; oy < TY; ++oy)
        #pragma unroll
        for (int tx = 0; tx < TX; ++tx)
            acc[oy][tx] = 0.0f;
    #pragma unroll
    for (int r = 0; r < TY + KS - 1; ++r) {
        const int yy = y0 + r;
        float row[SEG];
        #pragma unroll
        for (int c = 0; c < SEG; ++c) {
            const int xx = x0 + c;
            row[c] = (yy < H && xx < W) ? IN(yy, xx) : 0.0f;
        }
        #pragma unroll
        for (int u = 0; u < KS; ++u) {
            const int oy = r - u;
            if (oy >= 0 && oy < TY) {
                #pragma unroll
                for (int tx = 0; tx < TX; ++tx)
                    #pragma unroll
                    for (int v = 0; v < KS; ++v)
                        acc[oy][tx] += row[tx + v] * filt[u * KS + v];
            }
        }
    }
    #pragma unroll
    for (int oy = 0; oy < TY; ++oy)
        #pragma unroll
        for (int tx = 0; tx < TX; ++tx) {
            const int y = y0 + oy, x = x0 + tx;
            out[y * W + x] = (y <= H - KS && x <= W - KS) ? acc[oy][tx] : 0.0f;
        }
}
