/* Row softmax of the row-major [M, N] matrix X: one work-item per row, three passes
 * (row maximum, sum of exponentials, normalized write). */
__kernel void softmax(__global const float *X, __global float *Y, const int M, const int N)
{
    const int row = get_global_id(0);
    if (row >= M)
        return;
    __global const float *x = X + (size_t)row * N;
    __global float *y = Y + (size_t)row * N;
    float mx = -INFINITY;
    for (int j = 0; j < N; ++j)
        mx = fmax(mx, x[j]);
    float sum = 0.0f;
    for (int j = 0; j < N; ++j)
        sum += exp(x[j] - mx);
    for (int j = 0; j < N; ++j)
        y[j] = exp(x[j] - mx) / sum;
}
