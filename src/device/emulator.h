// Runs tessera's CUDA C kernels on the CPU, for tests on machines without a GPU
// (device::emulator). Included before a kernel source compiled with g++: it maps the CUDA
// keywords, built-in variables and intrinsics that the kernels use onto plain C++, and
// EMU_EXPORT(kernel) defines `emu_<kernel>`, which runs the kernel over a whole grid: blocks one
// after another; within a block either one thread after another, or — for kernels that call
// __syncthreads — one fiber (ucontext) per CUDA thread, all started, then each resumed in turn
// until it reaches the barrier or ends, round after round. `__shared__` variables are thread-local
// function statics: one copy per OS thread, which the block running on it at the time owns (tests
// launch kernels from several threads at once).
//
// What this proves: the kernels' index arithmetic, bounds and numerics (with -ffp-contract=off,
// fmaf is the one fused operation, as in the CUDA sources). What it cannot: anything about the
// GPU's memory model, races between blocks, warp-level behaviour, or NVRTC's code generation.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <ucontext.h>
#include <utility>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct float2 {
    float x, y;
};

static thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__ static inline
#define __forceinline__
#define __host__
#define __restrict__ __restrict
#define __shared__ static thread_local

// floorf, fmaxf, fminf and fmaf (a true fused multiply-add) come from <cmath>.
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }

namespace emu {

template <typename T>
using plain = typename std::remove_cv<typename std::remove_reference<T>::type>::type;

template <typename... A, std::size_t... I>
void call(void (*k)(A...), void** args, std::index_sequence<I...>) {
    k(*static_cast<plain<A>*>(args[I])...);
}

// The threads of one block as fibers: `body` runs one thread; `yield` returns to the scheduler.
struct Fibers {
    ucontext_t scheduler;
    std::vector<ucontext_t> contexts;
    std::vector<std::vector<char>> stacks;
    std::vector<char> finished;
    std::vector<dim3> ids;
    unsigned current = 0;
    void (*body)(void*) = nullptr;
    void* state = nullptr;
};
static thread_local Fibers* fibers = nullptr;

static void fiber_entry() {
    Fibers* f = fibers;
    f->body(f->state);
    f->finished[f->current] = 1;
    // Returning resumes `scheduler` through uc_link.
}

// Runs every thread of a block as a fiber until all have finished.
static void run_block(Fibers& f, dim3 block) {
    const std::size_t stack_bytes = 64 * 1024;
    unsigned n = block.x * block.y * block.z;
    f.contexts.assign(n, ucontext_t{});
    f.stacks.resize(n);
    f.finished.assign(n, 0);
    f.ids.clear();
    for (unsigned z = 0; z < block.z; ++z)
        for (unsigned y = 0; y < block.y; ++y)
            for (unsigned x = 0; x < block.x; ++x) f.ids.push_back(dim3{x, y, z});
    for (unsigned t = 0; t < n; ++t) {
        f.stacks[t].resize(stack_bytes);
        getcontext(&f.contexts[t]);
        f.contexts[t].uc_stack.ss_sp = f.stacks[t].data();
        f.contexts[t].uc_stack.ss_size = stack_bytes;
        f.contexts[t].uc_link = &f.scheduler;
        makecontext(&f.contexts[t], fiber_entry, 0);
    }
    for (bool any = true; any;) {
        any = false;
        for (unsigned t = 0; t < n; ++t) {
            if (f.finished[t]) continue;
            any = true;
            f.current = t;
            threadIdx = f.ids[t];
            swapcontext(&f.scheduler, &f.contexts[t]);
        }
    }
}

// Runs `k` over the grid; see the top of this file.
template <typename... A>
void launch(void (*k)(A...), const unsigned* grid, const unsigned* block, int threaded,
            void** args) {
    dim3 g{grid[0], grid[1], grid[2]}, b{block[0], block[1], block[2]};
    gridDim = g;
    blockDim = b;
    struct State {
        void (*k)(A...);
        void** args;
    } state{k, args};
    Fibers f;
    f.body = [](void* s) {
        State* st = static_cast<State*>(s);
        call(st->k, st->args, std::index_sequence_for<A...>{});
    };
    f.state = &state;
    for (unsigned bz = 0; bz < g.z; ++bz)
        for (unsigned by = 0; by < g.y; ++by)
            for (unsigned bx = 0; bx < g.x; ++bx) {
                blockIdx = dim3{bx, by, bz};
                if (threaded) {
                    fibers = &f;
                    run_block(f, b);
                    fibers = nullptr;
                    continue;
                }
                for (unsigned z = 0; z < b.z; ++z)
                    for (unsigned y = 0; y < b.y; ++y)
                        for (unsigned x = 0; x < b.x; ++x) {
                            threadIdx = dim3{x, y, z};
                            call(k, args, std::index_sequence_for<A...>{});
                        }
            }
}

}  // namespace emu

static inline void __syncthreads() {
    emu::Fibers* f = emu::fibers;
    if (!f) {
        // The host marks every kernel that synchronises (device::kernels checks the sources).
        std::fprintf(stderr, "emulator: __syncthreads in a kernel not marked as synchronising\n");
        std::abort();
    }
    swapcontext(&f->contexts[f->current], &f->scheduler);
}

#define EMU_EXPORT(name)                                                                         \
    extern "C" void emu_##name(const unsigned* grid, const unsigned* block, int threaded,        \
                               void** args) {                                                   \
        emu::launch(name, grid, block, threaded, args);                                         \
    }
