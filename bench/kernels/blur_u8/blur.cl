/* Box blur of an H x W image of bytes, clamped at the borders: the radius comes from a #define and the ids
 * share one declaration. The reference is already vectorized across work-items by a CPU runtime. */
#define RADIUS 1
#define DIAM (2 * RADIUS + 1)

__kernel void blur(__global const uchar *img, __global uchar *out, const int H, const int W)
{
    int x = get_global_id(0), y = get_global_id(1);
    if (x >= W || y >= H)
        return;
    int acc = 0;
    for (int dy = -RADIUS; dy <= RADIUS; ++dy)
        for (int dx = -RADIUS; dx <= RADIUS; ++dx) {
            int yy = clamp(y + dy, 0, H - 1), xx = clamp(x + dx, 0, W - 1);
            acc += img[yy * W + xx];
        }
    out[y * W + x] = (uchar)(acc / (DIAM * DIAM));
}
