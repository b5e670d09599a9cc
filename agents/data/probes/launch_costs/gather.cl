/* B = A^T for S x S matrices, written contiguously: B[i] = A[p(i)], p the transpose (its own inverse). */
__kernel __attribute__((reqd_work_group_size(16, 1, 1)))
void launch_costs(__global const float *A, __global float *B, const int s)
{
    const int i = get_global_id(0);
    B[i] = A[(size_t)(i % s) * s + i / s];
}
