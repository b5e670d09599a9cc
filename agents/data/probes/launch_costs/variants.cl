/* B = A^T (see task.toml):
 *   WG       work-group size
 *   SCATTER  0: B[i] = A[p(i)] (gathered loads, contiguous stores); 1: B[p(i)] = A[i] (contiguous loads,
 *            stores S elements apart from the neighbouring work-item's)
 */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void launch_costs(__global const float *A, __global float *B, const int s)
{
    const int i = get_global_id(0);
#if SCATTER
    B[(size_t)(i % s) * s + i / s] = A[i];
#else
    B[i] = A[(size_t)(i % s) * s + i / s];
#endif
}
