/* tests/cuda_emu/nccl.cpp — the NCCL stand-in of the CUDA emulator
 * (include/nccl.h): collectives across the ranks of an `mpirun` job, each
 * rank a process with its own emulated device.
 *
 * Transport: POSIX shared memory named by the unique id (ncclGetUniqueId:
 * "/sl-emu-nccl-<pid>-<n>-<random>"). Every rank of ncclCommInitRank maps
 * the segment (O_CREAT, so arrival order does not matter), meets the others
 * at a barrier, and rank 0 unlinks the name then (nothing is left in
 * /dev/shm, even when a rank dies later). Chosen over MPI because the
 * binary must not link libmpi (shard/comm.c loads it as a module, whose
 * progress thread owns the MPI calls), and the ranks all run on one host.
 *
 * Segment: a barrier (count, generation: sense by generation), one slot of
 * kSlot bytes per rank, one mailbox per ordered (src, dst) pair for
 * send / recv. A collective runs in chunks: each rank writes its part into
 * its slot, barrier, each rank reads what it needs from every slot (sums in
 * rank order 0..n-1, in fp32 for float and per step rounded for bf16, as the
 * MPI backend's bf16 sum), barrier. So results are deterministic and every
 * call completes before it returns, after the work queued before it on its
 * stream (sl_emu::run_now, which also gives its ranges to the race detector). Waits spin (yielding), then sleep, and give up
 * after SL_EMU_NCCL_TIMEOUT_S seconds (default 300) with ncclSystemError.
 *
 * Semantics kept from NCCL: counts per rank (all-gather's sendcount,
 * reduce-scatter's recvcount), the in-place variants (send inside recv at
 * the rank's block), ncclSum only, the data types of include/nccl.h but
 * half, root of broadcast, split by (color, key, rank), sends and recvs
 * between ncclGroupStart and ncclGroupEnd progressing together at the
 * group's end (an all-to-all; a send or recv to self is refused, as
 * comm_nccl.c copies that block itself). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "kernels/kernels.h"
#include "nccl.h"

struct sl_emu_nccl_comm {
  char name[NCCL_UNIQUE_ID_BYTES]; /* shared-memory name (already unlinked after init) */
  int rank, n;
  char *base;
  size_t bytes;
  unsigned long long splits; /* ncclCommSplit calls so far (same on every rank) */
  int broken;
};

namespace {
constexpr int kMaxRanks = 64;
constexpr size_t kSlot = 1u << 20, kBox = 256u << 10, kHead = 4096;
struct Barrier {
  unsigned count, gen;
};
struct Box {
  unsigned long long full, total, len; /* full: 1 while a chunk waits for the receiver */
};
thread_local char g_last[512] = "";

ncclResult_t fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
ncclResult_t fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last, sizeof g_last, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cuda-emu nccl: %s\n", g_last);
  if (c) c->broken = 1;
  return r;
}

double now_s() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
double timeout_s() {
  const char *t = getenv("SL_EMU_NCCL_TIMEOUT_S");
  return t && *t ? atof(t) : 300.0;
}
/* one step of a wait: yield at first, then sleep up to 200 us; false after the timeout */
bool wait_step(int *spins, double t0) {
  if (++*spins < 200) {
    sched_yield();
    return true;
  }
  struct timespec ts = {0, (*spins < 2000 ? 20 : 200) * 1000L};
  nanosleep(&ts, nullptr);
  return (*spins & 255) || now_s() - t0 < timeout_s();
}

size_t seg_bytes(int n) { return kHead + (size_t)n * kSlot + (size_t)n * n * (sizeof(Box) + kBox); }
char *slot(ncclComm_t c, int r) { return c->base + kHead + (size_t)r * kSlot; }
Box *box(ncclComm_t c, int src, int dst) {
  return (Box *)(c->base + kHead + (size_t)c->n * kSlot + ((size_t)src * c->n + dst) * (sizeof(Box) + kBox));
}

/* Every rank of c arrives before any leaves. */
ncclResult_t barrier(ncclComm_t c, const char *what) {
  if (c->n == 1) return ncclSuccess;
  Barrier *b = (Barrier *)c->base;
  unsigned g = __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == (unsigned)c->n) {
    __atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&b->gen, g + 1, __ATOMIC_RELEASE);
    return ncclSuccess;
  }
  int spins = 0;
  double t0 = now_s();
  while (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == g)
    if (!wait_step(&spins, t0))
      return fail(c, ncclSystemError, "%s on comm %s (rank %d of %d): the other ranks did not arrive within %.0f s",
                  what, c->name, c->rank, c->n, timeout_s());
  return ncclSuccess;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
  case ncclInt8:
  case ncclUint8: return 1;
  case ncclFloat16:
  case ncclBfloat16: return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32: return 4;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64: return 8;
  }
  return 0;
}

template <class T> void add_into(void *acc, const void *x, size_t n) {
  T *a = (T *)acc;
  const T *b = (const T *)x;
  for (size_t i = 0; i < n; i++) a[i] = (T)(a[i] + b[i]);
}
/* acc += x, n elements of t (acc first: the running sum of ranks 0..r-1) */
void add(ncclDataType_t t, void *acc, const void *x, size_t n) {
  switch (t) {
  case ncclInt8: add_into<signed char>(acc, x, n); return;
  case ncclUint8: add_into<unsigned char>(acc, x, n); return;
  case ncclInt32: add_into<int>(acc, x, n); return;
  case ncclUint32: add_into<unsigned>(acc, x, n); return;
  case ncclInt64: add_into<long long>(acc, x, n); return;
  case ncclUint64: add_into<unsigned long long>(acc, x, n); return;
  case ncclFloat32: add_into<float>(acc, x, n); return;
  case ncclFloat64: add_into<double>(acc, x, n); return;
  case ncclBfloat16: {
    uint16_t *a = (uint16_t *)acc;
    const uint16_t *b = (const uint16_t *)x;
    for (size_t i = 0; i < n; i++)
      a[i] = sl_f32_to_bf16_scalar(sl_bf16_to_f32_scalar(a[i]) + sl_bf16_to_f32_scalar(b[i]));
    return;
  }
  case ncclFloat16: return; /* refused by check() */
  }
}

/* Arguments every data call shares: comm, type, stream, the device ranges. */
ncclResult_t check(ncclComm_t c, const char *fn, ncclDataType_t t, cudaStream_t s, const void *send, size_t sbytes,
                   const void *recv, size_t rbytes) {
  if (!c) return fail(nullptr, ncclInvalidArgument, "%s: NULL communicator", fn);
  if (c->broken) return fail(c, ncclInvalidUsage, "%s on comm %s: the communicator failed earlier", fn, c->name);
  if (!type_size(t) || t == ncclFloat16)
    return fail(c, ncclInvalidArgument, "%s: data type %d not emulated", fn, (int)t);
  if (cudaStreamQuery(s) != cudaSuccess) return fail(c, ncclInvalidArgument, "%s: invalid stream", fn);
  if (send && sbytes && !sl_emu::device_range(send, sbytes))
    return fail(c, ncclInvalidArgument, "%s: sendbuff [%p, +%zu bytes) is not inside one device allocation", fn, send,
                sbytes);
  if (recv && rbytes && !sl_emu::device_range(recv, rbytes))
    return fail(c, ncclInvalidArgument, "%s: recvbuff [%p, +%zu bytes) is not inside one device allocation", fn, recv,
                rbytes);
  std::vector<sl_emu::access> acc; /* the call runs now, after what its stream has queued (emu.cpp "streams") */
  if (send && sbytes) sl_emu::note(acc, send, sbytes, false);
  if (recv && rbytes) sl_emu::note(acc, recv, rbytes, true);
  sl_emu::run_now(s, fn, std::move(acc));
  return ncclSuccess;
}
ncclResult_t check_op(ncclComm_t c, const char *fn, ncclRedOp_t op) {
  return op == ncclSum ? ncclSuccess
                       : fail(c, ncclInvalidArgument, "%s: reduction %d not emulated (ncclSum only)", fn, (int)op);
}

/* recv[r * len] = slot r, r = 0..n-1 (stride: recv's bytes per rank) */
void gather_slots(ncclComm_t c, char *recv, size_t stride, size_t len) {
  for (int r = 0; r < c->n; r++) memcpy(recv + (size_t)r * stride, slot(c, r), len);
}
/* dst = sum over r of (slot r + off), in rank order */
void sum_slots(ncclComm_t c, ncclDataType_t t, char *dst, size_t off, size_t cnt) {
  size_t es = type_size(t);
  std::vector<char> acc(slot(c, 0) + off, slot(c, 0) + off + cnt * es);
  for (int r = 1; r < c->n; r++) add(t, acc.data(), slot(c, r) + off, cnt);
  memcpy(dst, acc.data(), cnt * es);
}

/* Point-to-point: a message goes through the (src, dst) mailbox in chunks of
 * kBox bytes; the receiver checks the sender's total size. Between
 * ncclGroupStart and ncclGroupEnd the sends and recvs are only recorded;
 * ncclGroupEnd moves them all together, a chunk at a time wherever a mailbox
 * is free (sends) or full (recvs), so that every rank sending to every other
 * before receiving (an all-to-all) cannot deadlock, as in NCCL. Several
 * messages to (from) one peer in a group go in issue order. A call outside a
 * group is a group of one: a send returns once its last chunk is in the
 * mailbox; a send without a matching recv waits. */
struct P2p {
  ncclComm_t c;
  bool send;
  int peer;
  const char *sbuf;
  char *rbuf;
  size_t bytes, off;
  bool done;
};
thread_local std::vector<P2p> g_group; /* recorded since the outermost ncclGroupStart */
thread_local int g_depth;

/* Moves one chunk of p if its mailbox allows; *moved when it did. */
ncclResult_t p2p_step(P2p &p, bool *moved) {
  ncclComm_t c = p.c;
  Box *b = p.send ? box(c, c->rank, p.peer) : box(c, p.peer, c->rank);
  if (__atomic_load_n(&b->full, __ATOMIC_ACQUIRE) == (p.send ? 1ull : 0ull)) return ncclSuccess;
  size_t len;
  if (p.send) {
    b->total = p.bytes, b->len = len = std::min(kBox, p.bytes - p.off);
    memcpy(b + 1, p.sbuf + p.off, len);
    __atomic_store_n(&b->full, 1, __ATOMIC_RELEASE);
  } else {
    if (b->total != p.bytes)
      return fail(c, ncclInvalidUsage, "ncclRecv from %d on comm %s: %zu bytes expected, the send has %llu", p.peer,
                  c->name, p.bytes, b->total);
    len = b->len;
    memcpy(p.rbuf + p.off, b + 1, len);
    __atomic_store_n(&b->full, 0, __ATOMIC_RELEASE);
  }
  p.off += len;
  p.done = p.off >= p.bytes;
  *moved = true;
  return ncclSuccess;
}

/* Whether q is the first unfinished message of p's (comm, direction, peer) in the group. */
bool p2p_first(const std::vector<P2p> &g, size_t i) {
  for (size_t j = 0; j < i; j++)
    if (!g[j].done && g[j].c == g[i].c && g[j].send == g[i].send && g[j].peer == g[i].peer) return false;
  return true;
}

/* Runs the recorded group to completion (or a timeout naming the first message left). */
ncclResult_t p2p_run(std::vector<P2p> &g) {
  ncclResult_t e = ncclSuccess;
  int spins = 0;
  double t0 = now_s();
  for (;;) {
    bool left = false, moved = false;
    for (size_t i = 0; i < g.size() && e == ncclSuccess; i++) {
      if (g[i].done) continue;
      if (p2p_first(g, i)) e = p2p_step(g[i], &moved);
      left |= !g[i].done;
    }
    if (e != ncclSuccess || !left) return e;
    if (moved) {
      spins = 0, t0 = now_s();
      continue;
    }
    if (!wait_step(&spins, t0)) {
      size_t i = 0;
      while (g[i].done) i++;
      return fail(g[i].c, ncclSystemError, "%s %d on comm %s: no matching %s within %.0f s",
                  g[i].send ? "ncclSend to" : "ncclRecv from", g[i].peer, g[i].c->name,
                  g[i].send ? "ncclRecv" : "ncclSend", timeout_s());
    }
  }
}

/* Records a send or recv (checked), then runs it at once outside a group. */
ncclResult_t p2p_post(bool send, const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t s) {
  const char *fn = send ? "ncclSend" : "ncclRecv";
  size_t bytes = count * type_size(t);
  ncclResult_t e = send ? check(c, fn, t, s, buf, bytes, nullptr, 0) : check(c, fn, t, s, nullptr, 0, buf, bytes);
  if (e == ncclSuccess && (peer < 0 || peer >= c->n || peer == c->rank))
    e = fail(c, ncclInvalidArgument, "%s: peer %d (rank %d of %d)", fn, peer, c ? c->rank : -1, c ? c->n : 0);
  if (e != ncclSuccess) return e;
  g_group.push_back(P2p{c, send, peer, (const char *)buf, (char *)buf, bytes, 0, false});
  if (g_depth > 0) return ncclSuccess;
  e = p2p_run(g_group);
  g_group.clear();
  return e;
}
} // namespace

extern "C" {
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static unsigned counter;
  if (!id) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: NULL id");
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "/sl-emu-nccl-%d-%u-%llx", (int)getpid(),
           __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED),
           (unsigned long long)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (unsigned long long)ts.tv_sec);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm) return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: NULL comm");
  *comm = nullptr;
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank %d of %d (1..%d ranks emulated)", rank, nranks,
                kMaxRanks);
  if (id.internal[0] != '/' || !memchr(id.internal, 0, sizeof id.internal))
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: not an id from ncclGetUniqueId");
  sl_emu_nccl_comm *c = (sl_emu_nccl_comm *)calloc(1, sizeof *c);
  if (!c) return fail(nullptr, ncclSystemError, "ncclCommInitRank: out of memory");
  snprintf(c->name, sizeof c->name, "%s", id.internal);
  c->rank = rank, c->n = nranks, c->bytes = seg_bytes(nranks);
  int fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)c->bytes) != 0 ||
      (c->base = (char *)mmap(nullptr, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    int e = errno;
    if (fd >= 0) close(fd);
    free(c);
    return fail(nullptr, ncclSystemError, "ncclCommInitRank: shared memory %s (%zu bytes): %s", id.internal,
                seg_bytes(nranks), strerror(e));
  }
  close(fd);
  ncclResult_t r = barrier(c, "ncclCommInitRank");
  if (rank == 0) shm_unlink(c->name);
  if (r != ncclSuccess) {
    munmap(c->base, c->bytes);
    free(c);
    return r;
  }
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *) {
  if (!comm || !newcomm) return fail(comm, ncclInvalidArgument, "ncclCommSplit: NULL argument");
  *newcomm = nullptr;
  ncclResult_t e;
  int *mine = (int *)slot(comm, comm->rank);
  mine[0] = color, mine[1] = key;
  if ((e = barrier(comm, "ncclCommSplit")) != ncclSuccess) return e;
  std::vector<std::pair<int, int>> members; /* (key, rank) of my color */
  for (int r = 0; r < comm->n; r++) {
    const int *o = (const int *)slot(comm, r);
    if (o[0] == color) members.push_back({o[1], r});
  }
  if ((e = barrier(comm, "ncclCommSplit")) != ncclSuccess) return e;
  unsigned long long seq = comm->splits++;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  std::sort(members.begin(), members.end());
  int me = 0;
  while (members[me].second != comm->rank) me++;
  /* the child's name: a hash of the parent's, the split's number and the color */
  unsigned long long h = 0xcbf29ce484222325ull;
  for (const char *p = comm->name; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
  h = (h ^ seq) * 0x100000001b3ull;
  h = (h ^ (unsigned)color) * 0x100000001b3ull;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  snprintf(id.internal, sizeof id.internal, "/sl-emu-nccl-split-%016llx", h);
  return ncclCommInitRank(newcomm, (int)members.size(), id, me);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  munmap(comm->base, comm->bytes);
  free(comm);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  if (!comm || !count) return fail(comm, ncclInvalidArgument, "ncclCommCount: NULL argument");
  *count = comm->n;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  if (!comm || !rank) return fail(comm, ncclInvalidArgument, "ncclCommUserRank: NULL argument");
  *rank = comm->rank;
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error) {
  if (!comm || !async_error) return ncclInvalidArgument;
  *async_error = comm->broken ? ncclSystemError : ncclSuccess;
  return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error";
  case ncclSystemError: return "unhandled system error";
  case ncclInternalError: return "internal error";
  case ncclInvalidArgument: return "invalid argument";
  case ncclInvalidUsage: return "invalid usage";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}
const char *ncclGetLastError(ncclComm_t) { return g_last; }
ncclResult_t ncclGroupStart(void) {
  g_depth++;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
  if (g_depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g_depth > 0) return ncclSuccess;
  ncclResult_t e = p2p_run(g_group);
  g_group.clear();
  return e;
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t s) {
  size_t es = type_size(t), bytes = sendcount * es;
  ncclResult_t e = check(c, "ncclAllGather", t, s, sendbuff, bytes, recvbuff, c ? bytes * c->n : 0);
  for (size_t off = 0; e == ncclSuccess && off < bytes; off += kSlot) {
    size_t len = std::min(kSlot, bytes - off);
    memcpy(slot(c, c->rank), (const char *)sendbuff + off, len); /* in place: recv's own block is unchanged */
    if ((e = barrier(c, "ncclAllGather")) != ncclSuccess) break;
    gather_slots(c, (char *)recvbuff + off, bytes, len);
    e = barrier(c, "ncclAllGather");
  }
  return e;
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t s) {
  size_t es = type_size(t);
  ncclResult_t e =
      check(c, "ncclReduceScatter", t, s, sendbuff, c ? recvcount * es * c->n : 0, recvbuff, recvcount * es);
  if (e == ncclSuccess) e = check_op(c, "ncclReduceScatter", op);
  if (e != ncclSuccess) return e;
  size_t per = kSlot / ((size_t)c->n * es); /* elements per destination and chunk */
  for (size_t off = 0; off < recvcount; off += per) {
    size_t cnt = std::min(per, recvcount - off);
    for (int d = 0; d < c->n; d++) /* this rank's part for every destination */
      memcpy(slot(c, c->rank) + (size_t)d * cnt * es, (const char *)sendbuff + ((size_t)d * recvcount + off) * es,
             cnt * es);
    if ((e = barrier(c, "ncclReduceScatter")) != ncclSuccess) break;
    sum_slots(c, t, (char *)recvbuff + off * es, (size_t)c->rank * cnt * es, cnt);
    if ((e = barrier(c, "ncclReduceScatter")) != ncclSuccess) break;
  }
  return e;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t s) {
  size_t es = type_size(t);
  ncclResult_t e = check(c, "ncclAllReduce", t, s, sendbuff, count * es, recvbuff, count * es);
  if (e == ncclSuccess) e = check_op(c, "ncclAllReduce", op);
  if (e != ncclSuccess) return e;
  size_t per = kSlot / es;
  for (size_t off = 0; off < count; off += per) {
    size_t cnt = std::min(per, count - off);
    memcpy(slot(c, c->rank), (const char *)sendbuff + off * es, cnt * es);
    if ((e = barrier(c, "ncclAllReduce")) != ncclSuccess) break;
    sum_slots(c, t, (char *)recvbuff + off * es, 0, cnt);
    if ((e = barrier(c, "ncclAllReduce")) != ncclSuccess) break;
  }
  return e;
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
  size_t bytes = count * type_size(t);
  int me_root = c && c->rank == root;
  ncclResult_t e = check(c, "ncclBroadcast", t, s, me_root ? sendbuff : nullptr, bytes, recvbuff, bytes);
  if (e == ncclSuccess && (root < 0 || root >= c->n))
    e = fail(c, ncclInvalidArgument, "ncclBroadcast: root %d of %d ranks", root, c->n);
  for (size_t off = 0; e == ncclSuccess && off < bytes; off += kSlot) {
    size_t len = std::min(kSlot, bytes - off);
    if (me_root) memcpy(slot(c, root), (const char *)sendbuff + off, len);
    if ((e = barrier(c, "ncclBroadcast")) != ncclSuccess) break;
    if (!me_root || sendbuff != recvbuff) memcpy((char *)recvbuff + off, slot(c, root), len);
    e = barrier(c, "ncclBroadcast");
  }
  return e;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return p2p_post(true, sendbuff, count, t, peer, c, s);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return p2p_post(false, recvbuff, count, t, peer, c, s);
}
}
