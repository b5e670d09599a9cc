// A small CPU emulator for CUDA kernels, for tests on machines without an NVIDIA GPU.
//
// Why: nvcc proves a kernel compiles, not that its index math, shared-memory tiling and
// warp reductions compute the right thing. This header lets g++ compile the same kernel
// source and run it: every thread of a block is a fiber (ucontext) on one OS thread,
// blocks run one after another. __syncthreads() and warp shuffles are real barriers: a
// fiber yields there, and the scheduler releases a warp (or the block) only when all of
// its live threads have arrived, so a barrier inside divergent code is reported as a
// deadlock instead of passing silently. Threads that return early no longer count at
// barriers (as on Volta and later).
//
// Not emulated: the memory model (fibers interleave only at barriers, so a missing
// __syncthreads() that is needed on a GPU may go unnoticed), timing, texture/surface
// memory, dynamic shared memory, cooperative groups, most intrinsics.
#pragma once

#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// Blocks run one at a time, so one static copy of a __shared__ array is "the block's".
#define __shared__ static

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }

inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
static constexpr int warpSize = 32;

namespace emu {

enum class Wait { run, block_barrier, warp_barrier, done };

struct Fiber {
    ucontext_t ctx;
    Wait wait = Wait::run;
    unsigned tid = 0;
    uint3 idx{};
};

inline ucontext_t scheduler;
inline std::vector<Fiber> fibers;
inline std::vector<char> stacks;
inline std::vector<uint64_t> slots;  // one shuffle slot per thread
inline int current = -1;
inline std::function<void()> body;
constexpr size_t kStack = 128 * 1024;

inline void yield(Wait why) {
    Fiber& f = fibers[current];
    f.wait = why;
    swapcontext(&f.ctx, &scheduler);
}

inline void fiber_main() {
    body();
    fibers[current].wait = Wait::done;  // uc_link returns to the scheduler
}

[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "cuda_emu: %s (block %u,%u,%u)\n", what, blockIdx.x, blockIdx.y, blockIdx.z);
    std::exit(4);
}

// Run `kernel_call` for every thread of every block.
inline void launch(dim3 grid, dim3 block, std::function<void()> kernel_call) {
    const unsigned n = block.x * block.y * block.z;
    if (n == 0 || n > 1024) fail("block size must be 1..1024 threads");
    body = std::move(kernel_call);
    gridDim = grid;
    blockDim = block;
    fibers.assign(n, Fiber{});
    stacks.assign(size_t(n) * kStack, 0);
    slots.assign(n, 0);
    for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = {bx, by, bz};
        for (unsigned t = 0; t < n; ++t) {
            Fiber& f = fibers[t];
            f.tid = t;
            f.idx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            f.wait = Wait::run;
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = stacks.data() + size_t(t) * kStack;
            f.ctx.uc_stack.ss_size = kStack;
            f.ctx.uc_link = &scheduler;
            makecontext(&f.ctx, fiber_main, 0);
        }
        for (;;) {
            for (unsigned t = 0; t < n; ++t) {
                if (fibers[t].wait != Wait::run) continue;
                current = int(t);
                threadIdx = fibers[t].idx;
                swapcontext(&scheduler, &fibers[t].ctx);
            }
            bool live = false, released = false;
            for (unsigned w = 0; w < n; w += 32) {
                bool any = false, all_warp = true;
                for (unsigned t = w; t < n && t < w + 32; ++t) {
                    if (fibers[t].wait == Wait::done) continue;
                    any = true;
                    all_warp &= fibers[t].wait == Wait::warp_barrier;
                }
                live |= any;
                if (any && all_warp) {
                    for (unsigned t = w; t < n && t < w + 32; ++t)
                        if (fibers[t].wait == Wait::warp_barrier) fibers[t].wait = Wait::run;
                    released = true;
                }
            }
            if (!live) break;
            if (released) continue;
            bool all_block = true;
            for (unsigned t = 0; t < n; ++t)
                all_block &= fibers[t].wait == Wait::done || fibers[t].wait == Wait::block_barrier;
            if (!all_block) fail("deadlock: threads wait at different barriers (divergent __syncthreads or shuffle)");
            for (unsigned t = 0; t < n; ++t)
                if (fibers[t].wait == Wait::block_barrier) fibers[t].wait = Wait::run;
        }
    }
}

template <class T>
T shuffle_from(T v, int src_lane) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a type wider than 8 bytes");
    const unsigned tid = fibers[current].tid, base = tid - tid % 32;
    std::memcpy(&slots[tid], &v, sizeof(T));
    yield(Wait::warp_barrier);
    T out = v;
    const unsigned src = base + unsigned(src_lane);
    if (src_lane >= 0 && src_lane < 32 && src < fibers.size() && fibers[src].wait != Wait::done)
        std::memcpy(&out, &slots[src], sizeof(T));
    yield(Wait::warp_barrier);  // nobody overwrites a slot before everyone has read it
    return out;
}

inline int lane() { return int(fibers[current].tid % 32); }

// A device pointer that converts to whatever pointer type the kernel declares.
struct AnyPtr {
    void* p;
    template <class T> operator T*() const { return static_cast<T*>(p); }
};

}  // namespace emu

inline void __syncthreads() { emu::yield(emu::Wait::block_barrier); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::yield(emu::Wait::warp_barrier); }
inline void __threadfence() {}
inline void __threadfence_block() {}

template <class T> T __shfl_sync(unsigned, T v, int src, int width = 32) {
    const int l = emu::lane();
    return emu::shuffle_from(v, l - l % width + ((src % width) + width) % width);
}
template <class T> T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
    const int l = emu::lane(), s = l ^ mask;
    return emu::shuffle_from(v, (s / width == l / width) ? s : l);
}
template <class T> T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
    const int l = emu::lane();
    return emu::shuffle_from(v, (l % width) + int(delta) < width ? l + int(delta) : l);
}
template <class T> T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
    const int l = emu::lane();
    return emu::shuffle_from(v, (l % width) >= int(delta) ? l - int(delta) : l);
}

// Fibers interleave only at barriers, so read-modify-write is already atomic here.
template <class T> T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <class T> T atomicMax(T* p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <class T> T atomicMin(T* p, T v) { T old = *p; *p = old < v ? old : v; return old; }
template <class T> T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <class T> T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }

template <class T> T __ldg(const T* p) { return *p; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline int __float_as_int(float f) { int v; std::memcpy(&v, &f, 4); return v; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
