/* Tiled transpose through shared memory: a TILE x TILE tile per block, read along rows of
 * `A` and written along rows of `B`, so both sides coalesce. Block = (TILE, BLOCK_ROWS):
 * each thread moves TILE / BLOCK_ROWS elements. PAD = 1 adds a column to the tile so the
 * column-wise reads from shared memory do not hit the same bank. */
extern "C" __global__ __launch_bounds__(TILE * BLOCK_ROWS)
void transpose(const float* __restrict__ A, float* __restrict__ B, const int M, const int N)
{
    __shared__ float tile[TILE][TILE + PAD];
    const int bx = blockIdx.x * TILE, by = blockIdx.y * TILE;
    #pragma unroll
    for (int j = threadIdx.y; j < TILE; j += BLOCK_ROWS)
        tile[j][threadIdx.x] = A[(size_t)(by + j) * N + bx + threadIdx.x];
    __syncthreads();
    #pragma unroll
    for (int j = threadIdx.y; j < TILE; j += BLOCK_ROWS)
        B[(size_t)(bx + j) * M + by + threadIdx.x] = tile[threadIdx.x][j];
}
