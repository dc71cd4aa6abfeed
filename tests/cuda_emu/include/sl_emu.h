/* tests/cuda_emu/include/sl_emu.h — the device side of the CUDA emulator:
 * what a kernel sees when the kernels/cuda sources are compiled as host C++
 * (tests/cuda_emu/CMakeLists.txt rewrites `k<<<g, b, smem, s>>>(args)` into
 * `k * sl_emu_cfg(g, b, smem, s)(args)`, which queues the launch on stream
 * s; sl_emu::launch runs it when the stream is drained).
 *
 * Every CUDA thread runs as a fiber on the launching host thread; blocks run
 * one after the other, the fibers of a block in a shuffled order, each until
 * it reaches __syncthreads, a warp primitive or its end (emu.cpp). Hence:
 * - `__shared__` is `static`: a function static is per block because only one
 *   block runs at a time (UBSan's bounds check and ASan's global redzones
 *   guard the indexing);
 * - threadIdx / blockIdx / blockDim / gridDim are globals the scheduler sets
 *   before it resumes a fiber;
 * - atomics are plain read-modify-writes: fibers switch only at the yield
 *   points above. One launch at a time per process: the runtime calls take
 *   one lock, and queued work runs on whichever thread drains it. */
#ifndef SL_EMU_H
#define SL_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef struct CUstream_st *cudaStream_t;

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
constexpr int warpSize = 32;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))

namespace sl_emu {
enum { W_IDX, W_XOR, W_UP, W_DOWN, W_BALLOT, W_ANY, W_ALL, W_SYNC, W_MMA };
/* A warp primitive of the calling lane: blocks until every lane of `mask`
 * has arrived at the same primitive, then returns this lane's result. */
uint64_t warp_op(int kind, unsigned mask, uint64_t val, int arg, int width, const char *file, int line);
void syncthreads(const char *file, int line);
/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 of the calling lane
 * (kernels/cuda/mma.cuh): a warp collective of all 32 lanes. Each lane
 * brings its A (4 regs of 2 bf16), B (2 regs) and C (4 floats) fragments;
 * once all have arrived the 16x8 product is formed with the PTX ISA's
 * fragment layout and each lane gets its D fragment (d may alias c). */
void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], const char *file,
                       int line);
void *dyn_smem(); /* the block's `extern __shared__` buffer (launch's smem bytes) */
/* 1 when [p, p + bytes) lies inside one cudaMalloc / cudaMallocHost block */
bool device_range(const void *p, size_t bytes);

struct launch_cfg {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  const char *file; /* launch site */
  int line;
};
void launch(const launch_cfg &c, void (*run)(void *), void *arg);

template <class... A> struct pending { /* a launch configuration with its arguments */
  launch_cfg c;
  std::tuple<A...> args;
};
struct cfg_maker {
  launch_cfg c;
  template <class... A> pending<std::decay_t<A>...> operator()(A &&...a) const {
    return {c, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)};
  }
};
/* kernel * cfg(args): every thread of the grid calls kernel(args...) */
/* false (the error recorded) when the configuration or stream is invalid */
bool launch_ok(const launch_cfg &c);

/* ---- streams (emu.cpp "Streams"): work is queued per stream and run at
 * synchronising calls in a seeded random interleaving that respects stream
 * order and event waits; each queued op declares the device bytes it reads
 * and writes, and two ops of different streams that overlap (one writing)
 * with neither happening before the other (vector clocks) are a race. */
struct access {
  uintptr_t lo, hi; /* [lo, hi) */
  bool write;
};
/* [p, p + bytes), or with bytes 0 [p, end of p's allocation); nothing when p
 * is not device (or pinned) memory */
void note(std::vector<access> &acc, const void *p, size_t bytes, bool write);
/* queues run() on stream s (0: the legacy default stream) */
void enqueue(cudaStream_t s, const char *what, const char *file, int line, std::vector<access> acc,
             std::function<void()> run);
/* for work the caller does at once (the NCCL stand-in): runs what stream s
 * has queued, then checks and records acc as an op of s */
void run_now(cudaStream_t s, const char *what, std::vector<access> acc);

/* a kernel's pointer parameters: const T * read, T * read and written */
template <class P, class A> void note_arg(std::vector<access> &acc, const A &a) {
  if constexpr (std::is_pointer<P>::value) {
    P p = a;
    note(acc, (const void *)p, 0, !std::is_const<std::remove_pointer_t<P>>::value);
  }
}
template <class... P, class T, size_t... I>
void note_args(std::vector<access> &acc, const T &t, std::index_sequence<I...>) {
  (note_arg<P>(acc, std::get<I>(t)), ...);
}

template <class... P, class... A> void operator*(void (*k)(P...), pending<A...> &&p) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with a wrong argument count");
  if (!launch_ok(p.c)) return;
  std::vector<access> acc;
  note_args<P...>(acc, p.args, std::index_sequence_for<P...>{});
  auto args = std::make_shared<std::tuple<A...>>(std::move(p.args));
  launch_cfg c = p.c;
  enqueue(c.stream, "kernel", c.file, c.line, std::move(acc), [k, args, c] {
    struct job {
      void (*k)(P...);
      std::tuple<A...> *args;
    } j{k, args.get()};
    launch(
        c, [](void *v) { std::apply(((job *)v)->k, *((job *)v)->args); }, &j);
  });
}
template <class T> static inline T shfl(int kind, unsigned mask, T v, int arg, int width, const char *f, int l) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a large type");
  uint64_t b = 0;
  memcpy(&b, &v, sizeof v);
  b = warp_op(kind, mask, b, arg, width, f, l);
  memcpy(&v, &b, sizeof v);
  return v;
}
} // namespace sl_emu

inline sl_emu::cfg_maker sl_emu_cfg(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t s = 0,
                                    const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
  return {{grid, block, smem, s, file, line}};
}

/* ---- barriers and warp primitives (call site recorded for error messages) */
#define SL_EMU_LOC const char *file_ = __builtin_FILE(), int line_ = __builtin_LINE()
inline void __syncthreads(SL_EMU_LOC) { sl_emu::syncthreads(file_, line_); }
inline void __syncwarp(unsigned mask = 0xffffffffu, SL_EMU_LOC) {
  sl_emu::warp_op(sl_emu::W_SYNC, mask, 0, 0, 32, file_, line_);
}
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, SL_EMU_LOC) {
  return sl_emu::shfl(sl_emu::W_IDX, mask, v, src, width, file_, line_);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lmask, int width = 32, SL_EMU_LOC) {
  return sl_emu::shfl(sl_emu::W_XOR, mask, v, lmask, width, file_, line_);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32, SL_EMU_LOC) {
  return sl_emu::shfl(sl_emu::W_UP, mask, v, (int)d, width, file_, line_);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32, SL_EMU_LOC) {
  return sl_emu::shfl(sl_emu::W_DOWN, mask, v, (int)d, width, file_, line_);
}
inline unsigned __ballot_sync(unsigned mask, int pred, SL_EMU_LOC) {
  return (unsigned)sl_emu::warp_op(sl_emu::W_BALLOT, mask, pred != 0, 0, 32, file_, line_);
}
inline int __any_sync(unsigned mask, int pred, SL_EMU_LOC) {
  return (int)sl_emu::warp_op(sl_emu::W_ANY, mask, pred != 0, 0, 32, file_, line_);
}
inline int __all_sync(unsigned mask, int pred, SL_EMU_LOC) {
  return (int)sl_emu::warp_op(sl_emu::W_ALL, mask, pred != 0, 0, 32, file_, line_);
}
#undef SL_EMU_LOC

/* ---- atomics: plain (fibers never switch inside them) */
#define SL_EMU_ATOMIC(name, update)                                                                                    \
  template <class T> inline T name(T *p, T v) {                                                                        \
    T o = *p;                                                                                                          \
    *p = (update);                                                                                                     \
    return o;                                                                                                          \
  }
SL_EMU_ATOMIC(atomicAdd, o + v)
SL_EMU_ATOMIC(atomicExch, v)
SL_EMU_ATOMIC(atomicMax, o > v ? o : v)
SL_EMU_ATOMIC(atomicMin, o < v ? o : v)
#undef SL_EMU_ATOMIC
template <class T> inline T atomicCAS(T *p, T cmp, T v) {
  T o = *p;
  if (o == cmp) *p = v;
  return o;
}

/* ---- device math beyond libm */
#define SL_EMU_MINMAX(T)                                                                                               \
  static inline T min(T a, T b) { return a < b ? a : b; }                                                              \
  static inline T max(T a, T b) { return a > b ? a : b; }
SL_EMU_MINMAX(int)
SL_EMU_MINMAX(unsigned)
SL_EMU_MINMAX(long)
SL_EMU_MINMAX(unsigned long)
SL_EMU_MINMAX(long long)
SL_EMU_MINMAX(unsigned long long)
SL_EMU_MINMAX(float)
SL_EMU_MINMAX(double)
#undef SL_EMU_MINMAX
template <class To, class From> static inline To sl_emu_bits(From f) {
  static_assert(sizeof(To) == sizeof(From), "size");
  To t;
  memcpy(&t, &f, sizeof t);
  return t;
}
static inline unsigned __float_as_uint(float f) { return sl_emu_bits<unsigned>(f); }
static inline int __float_as_int(float f) { return sl_emu_bits<int>(f); }
static inline float __uint_as_float(unsigned u) { return sl_emu_bits<float>(u); }
static inline float __int_as_float(int i) { return sl_emu_bits<float>(i); }
static inline long long __double_as_longlong(double d) { return sl_emu_bits<long long>(d); }
static inline double __longlong_as_double(long long i) { return sl_emu_bits<double>(i); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); } /* one rounding, as the device */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
template <class T> static inline T __ldg(const T *p) { return *p; }

#endif /* SL_EMU_H */
