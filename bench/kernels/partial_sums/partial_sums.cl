/* Per-work-group partial sums (the first pass of a two-pass reduction), with the work-group's scratch passed
 * as a __local pointer argument: a tree in local memory between barriers. */
__kernel void partial_sums(__global const float *x, __global float *out, __local float *scratch, const int n)
{
    int gid = get_global_id(0), lid = get_local_id(0);
    scratch[lid] = gid < n ? x[gid] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s)
            scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        out[get_group_id(0)] = scratch[0];
}
