/* B = transpose(A) for row-major A [M, N] and B [N, M]: one element per work-item;
 * reads walk rows of A, writes walk columns of B (strided by M). */
__kernel void transpose(__global const float *A, __global float *B, const int M, const int N)
{
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    if (row < M && col < N)
        B[(size_t)col * M + row] = A[(size_t)row * N + col];
}
