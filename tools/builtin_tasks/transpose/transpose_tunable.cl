/* Tiled transpose: a work-group moves one TILE x TILE tile of A to B.
 *   TILE   tile edge (the work-group is TILE x TILE / RPT work-items)
 *   RPT    rows of the tile per work-item (coarsening)
 *   LOCAL  1: stage the tile in local memory so that both the reads of A and the writes of B walk rows;
 *          0: copy directly (reads walk rows, writes walk columns)
 *   PAD    extra column in the local tile (avoids bank conflicts on GPUs); only with LOCAL == 1
 * Geometry: global = (N, M / RPT), local = (TILE, TILE / RPT); the constraints guarantee that TILE
 * divides M and N.
 */
__kernel __attribute__((reqd_work_group_size(TILE, TILE / RPT, 1)))
void transpose(__global const float *A, __global float *B, const int M, const int N)
{
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int c0 = get_group_id(0) * TILE;  /* first column of A in this tile */
    const int r0 = get_group_id(1) * TILE;  /* first row of A in this tile */
#if LOCAL
    __local float tile[TILE][TILE + PAD];
    #pragma unroll
    for (int k = 0; k < TILE; k += TILE / RPT)
        tile[ty + k][tx] = A[(size_t)(r0 + ty + k) * N + c0 + tx];
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int k = 0; k < TILE; k += TILE / RPT)
        B[(size_t)(c0 + ty + k) * M + r0 + tx] = tile[tx][ty + k];
#else
    #pragma unroll
    for (int k = 0; k < TILE; k += TILE / RPT)
        B[(size_t)(c0 + tx) * M + r0 + ty + k] = A[(size_t)(r0 + ty + k) * N + c0 + tx];
#endif
}
