/* tests/cuda_emu/emu.cpp — the CUDA emulator's runtime: CUDA threads as
 * fibers, the block scheduler with its barrier / warp-primitive checks, and
 * the runtime API on host memory (include/cuda_runtime.h, include/sl_emu.h).
 *
 * A launch runs its blocks one after the other in a shuffled order, and a
 * block's fibers in a shuffled order (fixed seed, or SL_EMU_SEED:
 * reproducible), each until it blocks at __syncthreads or a warp
 * primitive or ends. When no fiber can run, the scheduler releases what is
 * complete: a warp primitive once every lane of its mask waits at one with
 * the same kind, mask and width (results exchanged here); a barrier once
 * every thread of the block waits at the same __syncthreads. Otherwise the
 * kernel is wrong and the launch fails with a message naming the launch
 * site, the block, the thread and the source line: a barrier some threads
 * skip or exited before, different barriers, a mask naming an exited,
 * missing or elsewhere-waiting lane, a lane outside its own mask, a shuffle
 * reading a lane outside the mask. The shuffled order makes a missing
 * barrier read stale shared data. The failed launch's fibers are abandoned.
 *
 * Context switch: a few lines of x86-64 assembly (callee-saved registers and
 * the stack pointer), ucontext elsewhere; ASan is told about every switch. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define SL_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SL_EMU_ASAN 1
#endif
#endif
#ifdef SL_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

/* ---- context switch: save callee-saved state on the current stack, store
 * its stack pointer in *save, continue on the stack `to` ------------------- */
#if defined(__x86_64__) && !defined(SL_EMU_UCONTEXT)
extern "C" void sl_emu_switch(void **save, void *to);
asm(".text\n.globl sl_emu_switch\n.hidden sl_emu_switch\n.type sl_emu_switch,@function\n"
    "sl_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n.size sl_emu_switch,.-sl_emu_switch\n");
#else
#include <ucontext.h>
static void sl_emu_switch(void **save, void *to) {
  ucontext_t self;
  *save = &self;
  swapcontext(&self, (ucontext_t *)to);
}
#endif

namespace sl_emu {
namespace {
enum State { RUN, BAR, WARP, DONE };
struct Fiber {
  char *stk = nullptr;  /* kStack bytes above a guard page */
  void *sp = nullptr;   /* saved stack pointer (or ucontext) while suspended */
  void *fake = nullptr; /* ASan fake stack */
  State state = DONE;
  uint3 tid{};
  int lane = 0;
  const char *file = ""; /* where it waits */
  int line = 0;
  int kind = 0, arg = 0, width = 32; /* warp primitive */
  unsigned mask = 0;
  uint64_t val = 0, res = 0;
};
constexpr size_t kStack = 256 << 10, kGuard = 4096;

struct Emu {
  std::vector<Fiber> f;
  std::vector<int> order;
  Fiber *cur = nullptr;
  void *sched_sp = nullptr, *sched_fake = nullptr;
  const void *main_bottom = nullptr;
  size_t main_size = 0;
  void (*run)(void *) = nullptr;
  void *arg = nullptr;
  launch_cfg cfg{};
  char *dyn = nullptr;
  bool failed = false, dirty = false;
  uint64_t rng = 0; /* shuffle state; 0: not seeded yet */
} E;

cudaError_t g_err = cudaSuccess, g_msg_err = cudaSuccess;
char g_msg[1024];

cudaError_t set_error(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t set_error(cudaError_t e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_msg, sizeof g_msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cuda-emu: %s\n", g_msg);
  g_err = g_msg_err = e;
  return e;
}

/* A kernel error: names the launch, the block and (when given) the thread. */
void fail(const Fiber *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fail(const Fiber *f, const char *fmt, ...) {
  char what[640], who[96] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (f) snprintf(who, sizeof who, ", thread (%u,%u,%u)", f->tid.x, f->tid.y, f->tid.z);
  set_error(cudaErrorLaunchFailure, "kernel launched at %s:%d, block (%u,%u,%u)%s: %s", E.cfg.file, E.cfg.line,
            blockIdx.x, blockIdx.y, blockIdx.z, who, what);
  E.failed = true;
}

void to_sched(bool exiting) {
  Fiber *f = E.cur;
#ifdef SL_EMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f->fake, E.main_bottom, E.main_size);
#endif
  sl_emu_switch(&f->sp, E.sched_sp);
#ifdef SL_EMU_ASAN
  __sanitizer_finish_switch_fiber(f->fake, nullptr, nullptr);
#endif
  (void)exiting;
}

void fiber_main() {
#ifdef SL_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &E.main_bottom, &E.main_size);
#endif
  E.run(E.arg);
  E.cur->state = DONE;
  to_sched(true);
  abort(); /* never resumed */
}

void to_fiber(Fiber *f) {
  E.cur = f;
  threadIdx = f->tid;
#ifdef SL_EMU_ASAN
  __sanitizer_start_switch_fiber(&E.sched_fake, f->stk, kStack);
#endif
  sl_emu_switch(&E.sched_sp, f->sp);
#ifdef SL_EMU_ASAN
  __sanitizer_finish_switch_fiber(E.sched_fake, nullptr, nullptr);
#endif
  E.cur = nullptr;
}

void fiber_start(Fiber &f) {
#if defined(__x86_64__) && !defined(SL_EMU_UCONTEXT)
  void **sp = (void **)(f.stk + kStack);
  *--sp = nullptr;                             /* fiber_main's return address: never used */
  *--sp = (void *)&fiber_main;                 /* popped by sl_emu_switch's ret */
  for (int i = 0; i < 6; i++) *--sp = nullptr; /* rbp rbx r12-r15 */
  f.sp = sp;
#else
  ucontext_t *uc = (ucontext_t *)(f.stk + kStack - sizeof(ucontext_t)); /* top of its stack */
  getcontext(uc);
  uc->uc_stack.ss_sp = f.stk;
  uc->uc_stack.ss_size = kStack - sizeof(ucontext_t) - 64;
  uc->uc_link = nullptr;
  makecontext(uc, fiber_main, 0);
  f.sp = uc;
#endif
  f.fake = nullptr;
  f.state = RUN;
}

const char *op_name(int kind) {
  static const char *const n[] = {"__shfl_sync",      "__shfl_xor_sync", "__shfl_up_sync",
                                  "__shfl_down_sync", "__ballot_sync",   "__any_sync",
                                  "__all_sync",       "__syncwarp",      "mma.sync.m16n8k16"};
  return n[kind];
}

/* Lane j's source lane for a shuffle of width w (CUDA's rules). */
int shfl_src(const Fiber &o, int j) {
  int w = o.width, base = j & ~(w - 1);
  switch (o.kind) {
  case W_IDX: return base + (o.arg & (w - 1));
  case W_XOR: return (j ^ o.arg) < base + w ? (j ^ o.arg) : j;
  case W_UP: return (j & (w - 1)) >= o.arg ? j - o.arg : j;
  case W_DOWN: return (j & (w - 1)) + o.arg < w ? j + o.arg : j;
  }
  return j;
}

/* One lane's operands of an emulated mma.sync (mma_m16n8k16_bf16). */
struct MmaArgs {
  const uint32_t *a, *b;
  const float *c;
  float *d;
};
float bf16_half(uint32_t r, int h) {
  uint32_t u = (r >> (16 * h) & 0xffffu) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* D = A B + C of a warp at an mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32,
 * with the PTX ISA's fragment layout ("Matrix Fragments for mma.m16n8k16 with
 * floating point type"): groupID g = lane >> 2, threadID_in_group t = lane % 4;
 * A (16x16, row) register r holds a_{2r}, a_{2r+1} (the lower-indexed element in
 * the low half): row g + 8 (r & 1), col 2t + h + 8 (r >> 1) for half h;
 * B (16x8, col) register r: row (k) 2t + h + 8r, col (n) g;
 * C, D (16x8) element i: row g + 8 (i >> 1), col 2t + (i & 1).
 * bf16 products are exact in fp32; the sum is formed in double and rounded
 * once (the hardware's accumulation order is unspecified). Every operand is
 * read before any D is written: d may alias c. */
void mma_release(Fiber *w) {
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; l++) {
    const MmaArgs *m = (const MmaArgs *)(uintptr_t)w[l].val;
    int g = l >> 2, t = l & 3;
    for (int r = 0; r < 4; r++)
      for (int h = 0; h < 2; h++) A[g + 8 * (r & 1)][2 * t + h + 8 * (r >> 1)] = bf16_half(m->a[r], h);
    for (int r = 0; r < 2; r++)
      for (int h = 0; h < 2; h++) B[2 * t + h + 8 * r][g] = bf16_half(m->b[r], h);
    for (int i = 0; i < 4; i++) C[g + 8 * (i >> 1)][2 * t + (i & 1)] = m->c[i];
  }
  for (int l = 0; l < 32; l++) {
    const MmaArgs *m = (const MmaArgs *)(uintptr_t)w[l].val;
    int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
      int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      double acc = C[row][col];
      for (int k = 0; k < 16; k++) acc += (double)A[row][k] * B[k][col];
      m->d[i] = (float)acc;
    }
  }
}

/* Completes every warp primitive whose mask has fully arrived. */
bool release_warps(int n) {
  bool any = false;
  for (int w0 = 0; w0 < n; w0 += 32) {
    int nl = n - w0 < 32 ? n - w0 : 32;
    Fiber *w = &E.f[w0];
    for (int l = 0; l < nl; l++) {
      if (w[l].state != WARP) continue;
      const Fiber &a = w[l];
      bool ready = true;
      for (int j = 0; j < 32; j++) {
        if (!(a.mask >> j & 1)) continue;
        if (j >= nl)
          return fail(&a, "%s (%s:%d): mask 0x%08x names lane %d, which does not exist (%d threads)", op_name(a.kind),
                      a.file, a.line, a.mask, j, n),
                 false;
        const Fiber &o = w[j];
        if (o.state == DONE)
          return fail(&a, "%s (%s:%d): mask 0x%08x names lane %d, which has exited", op_name(a.kind), a.file, a.line,
                      a.mask, j),
                 false;
        if (o.state != WARP) ready = false;
        else if (o.mask != a.mask || o.kind != a.kind || o.width != a.width)
          return fail(&a,
                      "lanes %d and %d meet at different warp primitives: %s mask 0x%08x width %d "
                      "(%s:%d) and %s mask 0x%08x width %d (%s:%d)",
                      l, j, op_name(a.kind), a.mask, a.width, a.file, a.line, op_name(o.kind), o.mask, o.width, o.file,
                      o.line),
                 false;
      }
      if (!ready) continue;
      if (a.kind == W_MMA) {
        if (a.mask != 0xffffffffu || nl != 32)
          return fail(&a, "%s (%s:%d): needs all 32 lanes of a full warp (mask 0x%08x, %d lanes)", op_name(a.kind),
                      a.file, a.line, a.mask, nl),
                 false;
        mma_release(w);
        for (int j = 0; j < 32; j++) w[j].state = RUN;
        any = true;
        continue;
      }
      uint64_t ballot = 0;
      for (int j = 0; j < 32; j++)
        if (a.mask >> j & 1) ballot |= (uint64_t)(w[j].val != 0) << j;
      for (int j = 0; j < 32; j++) {
        if (!(a.mask >> j & 1)) continue;
        Fiber &o = w[j];
        if (a.kind <= W_DOWN) {
          int s = shfl_src(o, j);
          if (!(a.mask >> s & 1))
            return fail(&o, "%s (%s:%d): lane %d reads lane %d, which is not in mask 0x%08x", op_name(a.kind), o.file,
                        o.line, j, s, a.mask),
                   false;
          o.res = w[s].val;
        } else {
          o.res = a.kind == W_BALLOT ? ballot : a.kind == W_ANY ? ballot != 0 : ballot == a.mask;
        }
      }
      for (int j = 0; j < 32; j++)
        if (a.mask >> j & 1) w[j].state = RUN;
      any = true;
    }
  }
  return any;
}

/* Releases the block barrier when every thread waits at the same one. */
bool release_barrier(int n) {
  const Fiber *first = nullptr;
  int waiting = 0, done = 0;
  for (int i = 0; i < n; i++) {
    const Fiber &f = E.f[i];
    if (f.state == WARP) return false;
    if (f.state == DONE) done++;
    if (f.state != BAR) continue;
    waiting++;
    if (!first) first = &f;
    else if (f.line != first->line || strcmp(f.file, first->file) != 0)
      return fail(&f,
                  "threads wait at different __syncthreads: this one at %s:%d, thread "
                  "(%u,%u,%u) at %s:%d",
                  f.file, f.line, first->tid.x, first->tid.y, first->tid.z, first->file, first->line),
             false;
  }
  if (!waiting) return false;
  if (done)
    return fail(first,
                "__syncthreads at %s:%d is reached by %d of %d threads; %d exited before "
                "it (a barrier must be reached by every thread of the block)",
                first->file, first->line, waiting, n, done),
           false;
  for (int i = 0; i < n; i++) E.f[i].state = RUN;
  return true;
}

/* Nothing can run and nothing completes: name a waiter and what it waits for. */
void deadlock(int n) {
  for (int i = 0; i < n; i++) {
    const Fiber &a = E.f[i];
    if (a.state != WARP) continue;
    int w0 = i & ~31;
    for (int j = 0; j < 32; j++) {
      if (!(a.mask >> j & 1) || E.f[w0 + j].state == WARP) continue;
      const Fiber &o = E.f[w0 + j];
      return fail(&a,
                  "deadlock: %s (%s:%d, mask 0x%08x) waits for lane %d, which waits at "
                  "__syncthreads (%s:%d)",
                  op_name(a.kind), a.file, a.line, a.mask, j, o.file, o.line);
    }
  }
  fail(nullptr, "deadlock: no thread can continue");
}

uint64_t xorshift() {
  if (!E.rng) { /* SL_EMU_SEED picks another (reproducible) schedule */
    const char *seed = getenv("SL_EMU_SEED");
    E.rng = seed && *seed ? strtoull(seed, nullptr, 0) * 0x9e3779b97f4a7c15ull + 1 : 0x2545f4914f6cdd1dull;
  }
  E.rng ^= E.rng << 13;
  E.rng ^= E.rng >> 7;
  E.rng ^= E.rng << 17;
  return E.rng;
}

void run_block(int n) {
  const dim3 b = E.cfg.block;
  for (int i = 0; i < n; i++) {
    Fiber &f = E.f[i];
    fiber_start(f);
    f.tid = {i % b.x, (i / b.x) % b.y, i / (b.x * b.y)};
    f.lane = i % 32;
  }
  for (;;) {
    E.order.clear();
    for (int i = 0; i < n; i++)
      if (E.f[i].state == RUN) E.order.push_back(i);
    for (size_t i = E.order.size(); i > 1; i--) std::swap(E.order[i - 1], E.order[xorshift() % i]);
    for (int i : E.order) {
      to_fiber(&E.f[i]);
      if (E.failed) return;
    }
    bool alive = false;
    for (int i = 0; i < n && !alive; i++) alive = E.f[i].state != DONE;
    if (!alive) return;
    if (release_warps(n) || (!E.failed && release_barrier(n))) continue;
    if (!E.failed) deadlock(n);
    return;
  }
}

Fiber *current(const char *what, const char *file, int line) {
  if (!E.cur) {
    fprintf(stderr, "cuda-emu: %s:%d: %s called outside a kernel\n", file, line, what);
    abort();
  }
  return E.cur;
}

struct Alloc {
  size_t bytes;
  bool pinned;
};
std::map<uintptr_t, Alloc> g_mem; /* device (and pinned host) allocations by start */

struct Rec;
struct Timer {
  int magic;
  std::shared_ptr<Rec> rec; /* its latest record; null: never recorded */
};
constexpr int kStreamMagic = 0x57e4, kEventMagic = 0xe7e4;

/* ---- streams: every stream operation is queued on its stream and run at a
 * synchronising call (below the runtime API: cudaStreamSynchronize,
 * cudaEventSynchronize / Query, cudaStreamQuery, cudaDeviceSynchronize,
 * blocking cudaMemcpy, a copy to pageable host memory, cudaFree, the NCCL
 * stand-in's calls), which runs queued ops one at a time, each the head of a
 * stream picked at random (xorshift: SL_EMU_SEED) among those whose waits
 * are met, until what it waits for is done. The legacy default stream (0)
 * waits for earlier work of every blocking stream and they for it, as CUDA
 * defines; cudaStreamNonBlocking streams do not.
 *
 * Race detector: a vector clock per stream (stream id -> ops of that stream
 * known done) and one for the host. An op, when it runs, takes the clocks of
 * what it waits for (event records, the legacy stream's implicit waits) and
 * the host's clock at its enqueue, then ticks its own stream. Every op keeps
 * its device byte ranges (kernel pointer arguments to the end of their
 * allocation; copies and memsets exactly) in a history; an op overlapping an
 * earlier op of another stream, one of them writing, whose clock it does not
 * cover, is reported (both ops, streams, the range) and the process aborts.
 * Host syncs advance the host's clock and prune the history. */
struct Rec { /* an op's completion: what event records and waits refer to */
  bool done = false;
  std::vector<uint64_t> vc;
  double ms = -1.0;
};
using RecP = std::shared_ptr<Rec>;
struct Op {
  const char *what, *file;
  int line;
  std::vector<access> acc;
  std::function<void()> run; /* empty: an event record or wait */
  std::vector<RecP> deps;    /* must be done first */
  std::vector<uint64_t> host;
  RecP rec;
};
struct StreamObj {
  int magic;
  int id;
  bool blocking;
  std::deque<Op> q;
  std::vector<uint64_t> vc;
  RecP last; /* the last op queued */
};
struct Hist {
  int stream;
  uint64_t clock;
  const char *what, *file;
  int line;
  access a;
};
StreamObj g_legacy{kStreamMagic, 0, true, {}, {}, nullptr};
std::vector<StreamObj *> g_streams{&g_legacy};
int g_next_id = 1;
std::vector<Hist> g_hist;
cudaError_t g_async = cudaSuccess; /* a queued kernel failed: the next sync says so */
/* Held by every call that touches memory, streams or events: shard/comm_nccl.c's
 * poller thread queries events (which drains queues, running kernels) while the
 * main thread queues work. */
std::recursive_mutex g_mu;
#define SL_EMU_LOCK std::lock_guard<std::recursive_mutex> sl_emu_lock_(sl_emu::g_mu)
/* The host's clock is per thread: a synchronisation orders only what the same thread queues
 * later. comm_nccl.c's poller queries events; with one host clock its queries would order the
 * main thread's kernels after the collectives and hide a missing event wait. */
struct HostClock {
  std::vector<uint64_t> vc;
  bool queues = false; /* listed in g_queuers: it queued work */
  ~HostClock();
};
std::vector<HostClock *> g_queuers; /* prune's floor: the threads that queue work */
thread_local HostClock t_host;
HostClock::~HostClock() {
  if (!queues) return;
  SL_EMU_LOCK;
  g_queuers.erase(std::remove(g_queuers.begin(), g_queuers.end(), this), g_queuers.end());
}

uint64_t at(const std::vector<uint64_t> &v, int i) { return (size_t)i < v.size() ? v[(size_t)i] : 0; }
void merge(std::vector<uint64_t> &d, const std::vector<uint64_t> &s) {
  if (d.size() < s.size()) d.resize(s.size(), 0);
  for (size_t i = 0; i < s.size(); i++) d[i] = d[i] > s[i] ? d[i] : s[i];
}
StreamObj *stream_of(cudaStream_t s) { return s ? (StreamObj *)s : &g_legacy; }
} // namespace

/* ---- device side --------------------------------------------------------- */
void syncthreads(const char *file, int line) {
  Fiber *f = current("__syncthreads", file, line);
  f->state = BAR, f->file = file, f->line = line;
  to_sched(false);
}

uint64_t warp_op(int kind, unsigned mask, uint64_t val, int arg, int width, const char *file, int line) {
  Fiber *f = current(op_name(kind), file, line);
  if (!(mask >> f->lane & 1))
    fail(f, "%s (%s:%d): lane %d is not in its own mask 0x%08x", op_name(kind), file, line, f->lane, mask);
  else if (width < 1 || width > 32 || (width & (width - 1)))
    fail(f, "%s (%s:%d): width %d is not a power of two <= 32", op_name(kind), file, line, width);
  f->state = WARP, f->file = file, f->line = line;
  f->kind = kind, f->mask = mask, f->val = val, f->arg = arg, f->width = width;
  to_sched(false); /* after a failure: never resumed */
  return f->res;
}

void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], const char *file,
                       int line) {
  MmaArgs m{a, b, c, d};
  warp_op(W_MMA, 0xffffffffu, (uint64_t)(uintptr_t)&m, 0, 32, file, line);
}

void *dyn_smem() { return E.dyn; }

bool device_range(const void *p, size_t bytes) {
  SL_EMU_LOCK;
  uintptr_t a = (uintptr_t)p;
  auto it = g_mem.upper_bound(a);
  if (it == g_mem.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second.bytes;
}

bool launch_ok(const launch_cfg &c) {
  const dim3 g = c.grid, b = c.block;
  unsigned long n = (unsigned long)b.x * b.y * b.z;
  if (E.cur) {
    fail(E.cur, "kernel launch at %s:%d from device code is not emulated", c.file, c.line);
    return false;
  }
  if (!n || n > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 || !g.x || !g.y || !g.z || g.x > 0x7fffffffu ||
      g.y > 65535 || g.z > 65535 || c.smem > (48u << 10)) {
    set_error(cudaErrorInvalidConfiguration,
              "launch at %s:%d: invalid configuration: grid "
              "(%u,%u,%u) block (%u,%u,%u) dynamic shared memory %zu bytes (<= 48 KiB)",
              c.file, c.line, g.x, g.y, g.z, b.x, b.y, b.z, c.smem);
    return false;
  }
  if (c.stream && ((StreamObj *)c.stream)->magic != kStreamMagic) {
    set_error(cudaErrorInvalidResourceHandle, "launch at %s:%d: invalid stream", c.file, c.line);
    return false;
  }
  return true;
}

/* Runs a kernel queued by operator* (launch_ok passed at the launch). */
void launch(const launch_cfg &c, void (*run)(void *), void *arg) {
  const dim3 g = c.grid, b = c.block;
  unsigned long n = (unsigned long)b.x * b.y * b.z;
  while (E.f.size() < n) {
    Fiber f;
    char *m = (char *)mmap(nullptr, kStack + kGuard, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      set_error(cudaErrorMemoryAllocation, "launch at %s:%d: no memory for fiber stacks", c.file, c.line);
      return;
    }
    mprotect(m, kGuard, PROT_NONE); /* a stack overflow faults */
    f.stk = m + kGuard;
    E.f.push_back(f);
  }
#ifdef SL_EMU_ASAN
  if (E.dirty) /* frames of abandoned fibers are still poisoned */
    for (Fiber &f : E.f) ASAN_UNPOISON_MEMORY_REGION(f.stk, kStack);
#endif
  E.dirty = false;
  E.cfg = c, E.run = run, E.arg = arg, E.failed = false;
  gridDim = g, blockDim = b;
  /* blocks in a shuffled order too: no kernel may rely on block order */
  std::vector<uint64_t> blocks((size_t)g.x * g.y * g.z);
  for (size_t i = 0; i < blocks.size(); i++) blocks[i] = i;
  for (size_t i = blocks.size(); i > 1; i--) std::swap(blocks[i - 1], blocks[xorshift() % i]);
  for (size_t i = 0; i < blocks.size() && !E.failed; i++) {
    uint64_t id = blocks[i];
    blockIdx = {(unsigned)(id % g.x), (unsigned)(id / g.x % g.y), (unsigned)(id / g.x / g.y)};
    E.dyn = (char *)malloc(c.smem ? c.smem : 1); /* exact size: ASan bounds it */
    memset(E.dyn, 0xff, c.smem);                 /* uninitialised reads give NaN */
    run_block((int)n);
    free(E.dyn);
    E.dyn = nullptr;
  }
  E.dirty = E.failed;
}

/* ---- streams (see "streams" above) --------------------------------------- */
namespace {
/* SL_EMU_STREAMS=eager: every op runs at its enqueue (the detector stays on) */
bool eager() {
  static const int on = [] {
    const char *v = getenv("SL_EMU_STREAMS");
    return v && !strcmp(v, "eager");
  }();
  return on;
}

double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
void where(char *buf, size_t n, const char *what, const char *file, int line, int stream) {
  int k = snprintf(buf, n, "%s", what);
  if (*file) k += snprintf(buf + k, n - (size_t)k, " at %s:%d", file, line);
  snprintf(buf + k, n - (size_t)k, " on stream %d%s", stream, stream ? "" : " (legacy default)");
}
[[noreturn]] void race(const Hist &h, const StreamObj *S, const Op &op, const access &a) {
  char x[256], y[256];
  where(x, sizeof x, h.what, h.file, h.line, h.stream);
  where(y, sizeof y, op.what, op.file, op.line, S->id);
  uintptr_t lo = h.a.lo > a.lo ? h.a.lo : a.lo, hi = h.a.hi < a.hi ? h.a.hi : a.hi;
  const char *seed = getenv("SL_EMU_SEED");
  fprintf(stderr,
          "cuda-emu: race on device bytes [%#lx, %#lx) (%lu bytes): %s %s them, then %s %s them, and no event "
          "wait or host synchronisation orders the two (SL_EMU_SEED=%s)\n",
          (unsigned long)lo, (unsigned long)hi, (unsigned long)(hi - lo), x, h.a.write ? "writes" : "reads", y,
          a.write ? "writes" : "reads", seed && *seed ? seed : "unset");
  abort();
}
/* Checks op (its clock already ticked on S) against the history, then adds it. */
void detect(const StreamObj *S, const Op &op) {
  for (const access &a : op.acc)
    for (const Hist &h : g_hist)
      if (h.stream != S->id && h.a.lo < a.hi && a.lo < h.a.hi && (h.a.write || a.write) &&
          h.clock > at(S->vc, h.stream))
        race(h, S, op, a);
  uint64_t c = at(S->vc, S->id);
  for (const access &a : op.acc) g_hist.push_back({S->id, c, op.what, op.file, op.line, a});
}
void exec(StreamObj *S) {
  Op op = std::move(S->q.front());
  S->q.pop_front();
  merge(S->vc, op.host);
  for (const RecP &d : op.deps) merge(S->vc, d->vc);
  if (S->vc.size() <= (size_t)S->id) S->vc.resize((size_t)S->id + 1, 0);
  S->vc[(size_t)S->id]++;
  detect(S, op);
  if (op.run) {
    E.failed = false;
    op.run();
    if (E.failed) g_async = cudaErrorLaunchFailure;
  }
  op.rec->vc = S->vc;
  op.rec->ms = now_ms();
  op.rec->done = true;
}
bool runnable(const StreamObj *S) {
  if (S->q.empty()) return false;
  for (const RecP &d : S->q.front().deps)
    if (!d->done) return false;
  return true;
}
/* Runs queued ops, a random runnable stream's head at a time, until done(). */
template <class F> void drain(F done) {
  std::vector<StreamObj *> ready;
  while (!done()) {
    ready.clear();
    for (StreamObj *S : g_streams)
      if (runnable(S)) ready.push_back(S);
    if (ready.empty()) {
      fprintf(stderr, "cuda-emu: internal error: queued stream work waits for nothing queued\n");
      abort();
    }
    exec(ready[ready.size() > 1 ? xorshift() % ready.size() : 0]);
  }
}
void drain_stream(StreamObj *S) {
  drain([S] { return S->q.empty(); });
}
/* Drops what every op to come happens after: covered by the clock of every thread
 * that queues work and by the host clock every queued op was enqueued with. */
void prune() {
  if (g_queuers.empty()) return;
  std::vector<uint64_t> floor = g_queuers[0]->vc;
  for (const HostClock *h : g_queuers)
    for (size_t i = 0; i < floor.size(); i++) floor[i] = std::min(floor[i], at(h->vc, (int)i));
  for (const StreamObj *S : g_streams)
    for (const Op &op : S->q)
      for (size_t i = 0; i < floor.size(); i++) floor[i] = std::min(floor[i], at(op.host, (int)i));
  size_t k = 0;
  for (const Hist &h : g_hist)
    if (h.clock > at(floor, h.stream)) g_hist[k++] = h;
  g_hist.resize(k);
}
/* This thread saw r complete: whatever it queues later happens after r. */
void host_knows(const RecP &r) {
  if (!r) return;
  merge(t_host.vc, r->vc);
  prune();
}
cudaError_t synced() {
  cudaError_t e = g_async;
  g_async = cudaSuccess;
  return e;
}
RecP push(StreamObj *S, Op op) {
  if (S == &g_legacy) {
    for (StreamObj *B : g_streams)
      if (B != S && B->blocking && B->last) op.deps.push_back(B->last);
  } else if (S->blocking && g_legacy.last) {
    op.deps.push_back(g_legacy.last);
  }
  if (!t_host.queues) {
    t_host.queues = true;
    g_queuers.push_back(&t_host);
  }
  op.host = t_host.vc;
  op.rec = std::make_shared<Rec>();
  RecP r = op.rec;
  S->last = r;
  S->q.push_back(std::move(op));
  if (eager()) drain_stream(S);
  return r;
}
} // namespace

void note(std::vector<access> &acc, const void *p, size_t bytes, bool write) {
  SL_EMU_LOCK;
  uintptr_t a = (uintptr_t)p;
  auto it = g_mem.upper_bound(a);
  if (!p || it == g_mem.begin()) return;
  --it;
  uintptr_t end = it->first + it->second.bytes;
  if (a < it->first || a >= end) return;
  acc.push_back({a, bytes ? a + bytes : end, write});
}
void enqueue(cudaStream_t s, const char *what, const char *file, int line, std::vector<access> acc,
             std::function<void()> run) {
  SL_EMU_LOCK;
  push(stream_of(s), Op{what, file, line, std::move(acc), std::move(run), {}, {}, nullptr});
}
void run_now(cudaStream_t s, const char *what, std::vector<access> acc) {
  SL_EMU_LOCK;
  StreamObj *S = stream_of(s);
  push(S, Op{what, "", 0, std::move(acc), nullptr, {}, {}, nullptr});
  drain_stream(S);
}
} // namespace sl_emu

/* ---- runtime API ------------------------------------------------------------ */
using sl_emu::g_mem;
using sl_emu::set_error;
using sl_emu::StreamObj;

cudaError_t cudaGetLastError() {
  cudaError_t e = sl_emu::g_err;
  sl_emu::g_err = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return sl_emu::g_err; }
const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorNoDevice: return "cudaErrorNoDevice";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
  case cudaErrorNotReady: return "cudaErrorNotReady";
  case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e) {
  static char buf[1200];
  if (e == cudaSuccess) return "no error";
  snprintf(buf, sizeof buf, "%s%s%s", cudaGetErrorName(e), e == sl_emu::g_msg_err ? ": " : "",
           e == sl_emu::g_msg_err ? sl_emu::g_msg : "");
  return buf;
}

cudaError_t cudaGetDeviceCount(int *n) { return n ? (*n = 1, cudaSuccess) : cudaErrorInvalidValue; }
cudaError_t cudaSetDevice(int dev) {
  return dev == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice, "cudaSetDevice(%d): one device", dev);
}
cudaError_t cudaGetDevice(int *dev) { return dev ? (*dev = 0, cudaSuccess) : cudaErrorInvalidValue; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
  if (!p || dev != 0) return set_error(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d)", dev);
  *p = cudaDeviceProp{"cuda-emu (CPU fibers)", (size_t)16 << 30, 48 << 10, 32, 1024, 1, 9, 0};
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *fr, size_t *total) {
  if (fr) *fr = (size_t)16 << 30;
  if (total) *total = (size_t)16 << 30;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  SL_EMU_LOCK;
  using namespace sl_emu;
  drain([] {
    for (StreamObj *S : g_streams)
      if (!S->q.empty()) return false;
    return true;
  });
  for (StreamObj *S : g_streams) host_knows(S->last);
  return synced();
}
cudaError_t cudaRuntimeGetVersion(int *v) { return v ? (*v = 13000, cudaSuccess) : cudaErrorInvalidValue; }
cudaError_t cudaDriverGetVersion(int *v) { return v ? (*v = 13000, cudaSuccess) : cudaErrorInvalidValue; }
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) { /* as on an H100: 0 .. -5 */
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

static cudaError_t emu_alloc(void **p, size_t bytes, bool pinned, const char *fn) {
  SL_EMU_LOCK;
  if (!p) return set_error(cudaErrorInvalidValue, "%s: NULL result pointer", fn);
  *p = nullptr;
  void *q = nullptr;
  if (bytes > ((size_t)16 << 30) || posix_memalign(&q, 256, bytes ? bytes : 1))
    return set_error(cudaErrorMemoryAllocation, "%s(%zu bytes): out of memory", fn, bytes);
  memset(q, 0xff, bytes); /* NaN: reads of never-written memory show */
  g_mem[(uintptr_t)q] = {bytes, pinned};
  *p = q;
  return cudaSuccess;
}
static bool bad_stream(cudaStream_t s);
/* The allocation's bytes leave the race history with it (the address may come back). */
static void emu_release(void *p) {
  auto it = g_mem.find((uintptr_t)p);
  uintptr_t lo = it->first, hi = lo + it->second.bytes;
  size_t k = 0;
  for (const sl_emu::Hist &h : sl_emu::g_hist)
    if (h.a.hi <= lo || h.a.lo >= hi) sl_emu::g_hist[k++] = h;
  sl_emu::g_hist.resize(k);
  g_mem.erase(it);
  free(p);
}
/* cudaFree / cudaFreeHost synchronise the device first, as CUDA's do; cudaFreeAsync
 * is queued on its stream (a write of the whole block for the race detector) */
static cudaError_t emu_free(void *p, bool pinned, const char *fn, cudaStream_t s = 0, bool async = false) {
  SL_EMU_LOCK;
  if (!p) return cudaSuccess;
  if (async && bad_stream(s)) return set_error(cudaErrorInvalidResourceHandle, "%s: bad stream", fn);
  auto it = g_mem.find((uintptr_t)p);
  if (it == g_mem.end() || it->second.pinned != pinned)
    return set_error(cudaErrorInvalidValue, "%s(%p): not a pointer from %s", fn, p,
                     pinned ? "cudaMallocHost" : "cudaMalloc");
  if (async) {
    std::vector<sl_emu::access> acc;
    sl_emu::note(acc, p, 0, true);
    sl_emu::enqueue(s, fn, "", 0, std::move(acc), [p] { emu_release(p); });
    return cudaSuccess;
  }
  cudaError_t e = cudaDeviceSynchronize();
  emu_release(p);
  return e;
}
cudaError_t cudaMalloc(void **p, size_t bytes) { return emu_alloc(p, bytes, false, "cudaMalloc"); }
cudaError_t cudaFree(void *p) { return emu_free(p, false, "cudaFree"); }
cudaError_t cudaMallocHost(void **p, size_t bytes) { return emu_alloc(p, bytes, true, "cudaMallocHost"); }
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned) { return emu_alloc(p, bytes, true, "cudaHostAlloc"); }
cudaError_t cudaFreeHost(void *p) { return emu_free(p, true, "cudaFreeHost"); }
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s) {
  if (bad_stream(s)) return set_error(cudaErrorInvalidResourceHandle, "cudaMallocAsync: bad stream");
  return emu_alloc(p, bytes, false, "cudaMallocAsync");
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { return emu_free(p, false, "cudaFreeAsync", s, true); }

static bool bad_stream(cudaStream_t s) { return s && ((sl_emu::StreamObj *)s)->magic != sl_emu::kStreamMagic; }
static cudaError_t check_dev(const void *p, size_t bytes, const char *fn, const char *what) {
  if (sl_emu::device_range(p, bytes)) return cudaSuccess;
  return set_error(cudaErrorInvalidValue,
                   "%s: %s [%p, +%zu bytes) is not inside one device "
                   "allocation",
                   fn, what, p, bytes);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k, cudaStream_t s) {
  SL_EMU_LOCK;
  if (bad_stream(s)) return set_error(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: bad stream");
  if (!bytes) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  if (k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice)
    e = check_dev(dst, bytes, "cudaMemcpy", "destination");
  if (!e && (k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice))
    e = check_dev(src, bytes, "cudaMemcpy", "source");
  if (!e && (!dst || !src)) e = set_error(cudaErrorInvalidValue, "cudaMemcpy: NULL pointer");
  if (e) return e;
  std::vector<sl_emu::access> acc;
  sl_emu::note(acc, dst, bytes, true);
  sl_emu::note(acc, src, bytes, false);
  std::function<void()> run = [dst, src, bytes] { memcpy(dst, src, bytes); }; /* overlap: ASan says so */
  if (!sl_emu::device_range(src, bytes)) { /* pageable source: staged at the call, as CUDA does */
    auto st = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + bytes);
    run = [dst, st] { memcpy(dst, st->data(), st->size()); };
  }
  sl_emu::enqueue(s, "cudaMemcpyAsync", "", 0, std::move(acc), std::move(run));
  if (sl_emu::device_range(dst, bytes)) return cudaSuccess;
  StreamObj *S = sl_emu::stream_of(s); /* pageable destination: done at return, as CUDA does */
  sl_emu::drain_stream(S);
  sl_emu::host_knows(S->last);
  return sl_emu::synced();
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k) {
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, 0);
  return e ? e : cudaStreamSynchronize(0);
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s) {
  SL_EMU_LOCK;
  if (bad_stream(s)) return set_error(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: bad stream");
  if (!bytes) return cudaSuccess;
  cudaError_t e = check_dev(p, bytes, "cudaMemset", "destination");
  if (e) return e;
  std::vector<sl_emu::access> acc;
  sl_emu::note(acc, p, bytes, true);
  sl_emu::enqueue(s, "cudaMemsetAsync", "", 0, std::move(acc), [p, v, bytes] { memset(p, v, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t bytes) { return cudaMemsetAsync(p, v, bytes, 0); }
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t s) {
  SL_EMU_LOCK;
  if (bad_stream(s)) return set_error(cudaErrorInvalidResourceHandle, "cudaMemset2DAsync: bad stream");
  if (!width || !height) return cudaSuccess;
  if (width > pitch) return set_error(cudaErrorInvalidValue, "cudaMemset2DAsync: width %zu > pitch %zu", width, pitch);
  cudaError_t e = check_dev(p, pitch * (height - 1) + width, "cudaMemset2DAsync", "destination");
  if (e) return e;
  std::vector<sl_emu::access> acc;
  sl_emu::note(acc, p, pitch * (height - 1) + width, true);
  sl_emu::enqueue(s, "cudaMemset2DAsync", "", 0, std::move(acc), [=] {
    for (size_t r = 0; r < height; r++) memset((char *)p + r * pitch, v, width);
  });
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  SL_EMU_LOCK;
  if (!s) return set_error(cudaErrorInvalidValue, "cudaStreamCreate: NULL");
  StreamObj *S =
      new StreamObj{sl_emu::kStreamMagic, sl_emu::g_next_id++, !(flags & cudaStreamNonBlocking), {}, {}, nullptr};
  sl_emu::g_streams.push_back(S);
  *s = (cudaStream_t)S;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int) {
  return cudaStreamCreateWithFlags(s, flags);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  SL_EMU_LOCK;
  if (!s || bad_stream(s)) return set_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: bad stream");
  StreamObj *S = (StreamObj *)s;
  sl_emu::drain_stream(S); /* its queued work completes */
  auto &v = sl_emu::g_streams;
  for (size_t i = 0; i < v.size(); i++)
    if (v[i] == S) v.erase(v.begin() + (long)i);
  S->magic = 0;
  delete S;
  return sl_emu::synced();
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  SL_EMU_LOCK;
  if (bad_stream(s)) return set_error(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: bad stream");
  StreamObj *S = sl_emu::stream_of(s);
  sl_emu::drain_stream(S);
  sl_emu::host_knows(S->last);
  return sl_emu::synced();
}
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }

static sl_emu::Timer *timer(cudaEvent_t e) {
  sl_emu::Timer *t = (sl_emu::Timer *)e;
  return t && t->magic == sl_emu::kEventMagic ? t : nullptr;
}
/* SL_EMU_PLANT=no-stream-wait: waits of blocking streams (the compute stream; comm streams are
 * non-blocking) are dropped, a planted missing wait for the race detector's negative control */
static bool plant_no_stream_wait(cudaStream_t s) {
  static const bool on = [] {
    const char *v = getenv("SL_EMU_PLANT");
    return v && !strcmp(v, "no-stream-wait");
  }();
  return on && sl_emu::stream_of(s)->blocking;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  SL_EMU_LOCK;
  if (bad_stream(s) || !timer(e)) return set_error(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent");
  if (!timer(e)->rec || plant_no_stream_wait(s)) return cudaSuccess; /* never recorded: nothing to wait for */
  sl_emu::push(sl_emu::stream_of(s), {"cudaStreamWaitEvent", "", 0, {}, nullptr, {timer(e)->rec}, {}, nullptr});
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
  if (!e) return set_error(cudaErrorInvalidValue, "cudaEventCreate: NULL");
  *e = (cudaEvent_t) new sl_emu::Timer{sl_emu::kEventMagic, nullptr};
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  SL_EMU_LOCK;
  if (!timer(e)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventDestroy: bad event");
  timer(e)->magic = 0;
  delete (sl_emu::Timer *)e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  SL_EMU_LOCK;
  if (!timer(e) || bad_stream(s)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventRecord");
  timer(e)->rec = sl_emu::push(sl_emu::stream_of(s), {"cudaEventRecord", "", 0, {}, nullptr, {}, {}, nullptr});
  return cudaSuccess;
}
/* cudaEventQuery too: the emulator completes the event rather than say cudaErrorNotReady */
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  SL_EMU_LOCK;
  if (!timer(e)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventSynchronize");
  std::shared_ptr<sl_emu::Rec> r = timer(e)->rec;
  if (!r) return cudaSuccess;
  sl_emu::drain([&r] { return r->done; });
  sl_emu::host_knows(r);
  return sl_emu::synced();
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  SL_EMU_LOCK;
  if (!ms || !timer(a) || !timer(b) || !timer(a)->rec || !timer(b)->rec)
    return set_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: events not recorded");
  cudaEventSynchronize(a);
  cudaEventSynchronize(b);
  *ms = (float)(timer(b)->rec->ms - timer(a)->rec->ms);
  return cudaSuccess;
}
