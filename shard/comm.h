/* shard/comm.h — the one communication interface of shardlm.
 *
 * Collectives over a group of ranks with typed element counts (never bytes),
 * non-blocking with handles, a byte counter per collective kind, and a
 * watchdog. Backends sit behind a vtable: MPI (host buffers, this file's
 * default, loaded as a module under a launcher), self (one process, no MPI
 * library) and NCCL (device buffers, bootstrapped over the world comm or a
 * file / TCP rendezvous).
 *
 * Ordering: every non-blocking call is queued to the backend's progress
 * engine (for MPI: one communication thread per communicator) in issue order;
 * all ranks of a group must issue the same collectives in the same order.
 * Progress never depends on the caller's thread calling back into the
 * library: sl_comm_wait only blocks on the handle.
 */
#ifndef SL_COMM_H
#define SL_COMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SL_F32 = 0, SL_BF16 = 1, SL_I32 = 2, SL_I64 = 3, SL_U8 = 4, SL_F64 = 5 } sl_dtype;
size_t sl_dtype_size(sl_dtype t);
const char *sl_dtype_name(sl_dtype t);

typedef enum {
  SL_COLL_ALLGATHER = 0,
  SL_COLL_REDUCE_SCATTER,
  SL_COLL_ALLREDUCE,
  SL_COLL_BROADCAST,
  SL_COLL_SEND, /* point-to-point send (sl_comm_send) */
  SL_COLL_BARRIER,
  SL_COLL_RECV,     /* point-to-point receive (sl_comm_recv) */
  SL_COLL_ALLTOALL, /* all-to-all with per-peer counts (sl_comm_alltoallv) */
  SL_COLL_NKINDS
} sl_coll_kind;
const char *sl_coll_name(sl_coll_kind k);

typedef struct sl_comm sl_comm;         /* opaque: a group of ranks */
typedef struct sl_comm_req sl_comm_req; /* opaque: one in-flight operation */

/* Per-communicator traffic statistics. bytes[k] counts, per rank, the bytes
 * this rank sends on the wire under a ring algorithm — the standard "bus"
 * figure: all-gather and reduce-scatter (n-1)/n of the full buffer,
 * all-reduce 2(n-1)/n, broadcast the buffer (root), send the message,
 * all-to-all what this rank sends to the other ranks (its block to itself
 * stays local).
 * bytes[SL_COLL_RECV] is the one inbound figure: the messages this rank
 * received (so the sent total is the sum over every other kind).
 * For n == 1 every operation moves 0 bytes (a send to self included). wait_ns is the host time callers
 * spent blocked in sl_comm_wait (and in sl_comm_wait_stream where that is a host wait); a wait handed
 * to the device adds only its issue, not the stream's stall. alltoall_ns is the wall time callers spent
 * inside sl_comm_alltoallv and in sl_comm_wait on its requests (a part of
 * wait_ns besides the issue). stream_waits counts the requests sl_comm_wait_stream handed to the
 * device (NCCL; 0 on host backends). */
typedef struct {
  uint64_t calls[SL_COLL_NKINDS];
  uint64_t bytes[SL_COLL_NKINDS];
  uint64_t wait_ns;
  uint64_t alltoall_ns;
  uint64_t stream_waits;
} sl_comm_stats;

/* Status codes: 0 ok, negative on error (message via sl_comm_last_error). */
enum { SL_COMM_OK = 0, SL_COMM_ERR = -1, SL_COMM_TIMEOUT = -2 };

/* ---- world setup --------------------------------------------------------- */
/* Creates the world communicator. Under a launcher (mpirun / srun: the
 * OMPI_COMM_WORLD_*, PMI_*, PMIX_* variables, or SLURM_STEP_NUM_TASKS > 1)
 * or with SL_COMM=mpi it loads the MPI module libsl_comm_mpi.so (dlopen) and
 * initialises MPI (MPI_THREAD_MULTIPLE); otherwise (or SL_COMM=self) the
 * world is this one process and no MPI library is ever loaded ("self").
 * timeout_s is the watchdog limit for every collective of every
 * communicator created afterwards (<= 0: no watchdog; MPI only). */
int sl_comm_world_init(int *argc, char ***argv, double timeout_s, sl_comm **world);
/* Finalises the world (MPI_Finalize) after all communicators are destroyed. */
void sl_comm_world_finalize(void);
/* Aborts every rank of the job (MPI_Abort; self: _exit) with exit code
 * `code`. Only for tools/ and the watchdog. */
void sl_comm_abort(int code);
/* "mpi", "self", or "none" before sl_comm_world_init. */
const char *sl_comm_world_backend(void);
/* 1 when a launcher started this process (the variables above). */
int sl_comm_under_mpi_launcher(void);

/* A one-rank communicator over buffers that only `copy` may move (device
 * memory): every collective is the identity, and the non-in-place ones
 * (all-gather, reduce-scatter, all-to-all) call copy(ctx, dst, src, bytes), which must
 * be ordered before any later use of dst by the caller (a copy queued on
 * the compute stream is). Send/recv are refused. Splits are one-rank comms
 * with the same copy. What fsdp uses at world size 1 on a device backend,
 * so that such a run needs no NCCL. */
typedef int (*sl_comm_copy_fn)(void *ctx, void *dst, const void *src, size_t bytes);
int sl_comm_local_create(const char *name, sl_comm_copy_fn copy, void *ctx, sl_comm **out);

/* ---- counting backend (shard/comm_count.c) ------------------------------- */
/* A communicator of `size` ranks in which this process plays `rank`: every
 * operation is accounted in the stats exactly as on MPI / NCCL, completes
 * at once and moves nothing (the planner's engine check). split answers,
 * for the n-th split (from 0) of a communicator made from this one, what
 * color and key group rank `rank` passes (0 ok, else sl_fail set); NULL
 * refuses splits. Children are counting communicators with the same rule. */
typedef int (*sl_comm_count_split_fn)(void *ctx, int n, int rank, int *color, int *key);
int sl_comm_count_create(int size, int rank, sl_comm_count_split_fn split, void *ctx, sl_comm **out);
/* A rule whose children split by rules of their own (n counts per
 * communicator): child gives the rule of the communicator the n-th split
 * makes for `color` (its split NULL: that child refuses splits); child NULL:
 * children split by this same rule, as sl_comm_count_create's do. */
typedef struct sl_comm_count_rule {
  sl_comm_count_split_fn split;
  struct sl_comm_count_rule (*child)(void *ctx, int n, int color);
  void *ctx;
} sl_comm_count_rule;
int sl_comm_count_create_rule(int size, int rank, const sl_comm_count_rule *rule, sl_comm **out);

/* ---- NCCL backend (device buffers; shard/comm_nccl.c) ------------------- */
/* Creates an NCCL communicator over the ranks of the host communicator
 * `mpi_parent` (MPI or self; same ranks, same order; collective over it): rank 0's
 * ncclUniqueId is broadcast over MPI, then ncclCommInitRank on the calling
 * thread's current CUDA device. Every buffer passed to it afterwards is
 * device memory of that device. cuda_stream (a cudaStream_t; NULL = the
 * legacy default stream) is the compute stream: each operation first waits
 * (on the device, through an event) for the work queued there before the
 * call, then runs on the communicator's own stream; the request completes
 * when its completion event does (sl_comm_wait / sl_comm_test query it).
 * The parent must outlive the result. Splits of the result are NCCL comms
 * too. Built without NCCL: SL_COMM_ERR, message "built without NCCL".
 * NCCL differences from MPI: send/recv match by issue order per peer pair
 * (tags are checked, not used), each runs alone on the comm stream (a pair
 * exchanging both ways must order send and recv oppositely on the two
 * sides), and send/recv to self is refused. */
int sl_comm_nccl_create(sl_comm *mpi_parent, void *cuda_stream, sl_comm **out);
/* The same without any host communicator, for single-node multi-GPU runs
 * on a machine without MPI: ranks and world from `boot`
 * (shard/bootstrap.h, sl_boot_from_env), rank 0's ncclUniqueId handed over
 * its fs or tcp rendezvous (waiting at most timeout_s), then
 * ncclCommInitRank. Collective over boot->size processes. Such a comm
 * cannot be split (no host twin): sl_comm_split on it fails with a message. */
struct sl_boot_env;
int sl_comm_nccl_create_boot(const struct sl_boot_env *boot, void *cuda_stream, double timeout_s, sl_comm **out);

/* Splits `parent` into groups: ranks with the same color form one comm,
 * ordered by key. Collective over parent. */
int sl_comm_split(sl_comm *parent, int color, int key, sl_comm **out);
void sl_comm_destroy(sl_comm *c);

int sl_comm_rank(const sl_comm *c);
int sl_comm_size(const sl_comm *c);
int sl_comm_world_rank(const sl_comm *c, int rank); /* rank in world of group rank */
const char *sl_comm_backend(const sl_comm *c);      /* "mpi" or "nccl" */

/* ---- non-blocking collectives ----------------------------------------- */
/* All return a request in *req (never NULL on success); complete it with
 * sl_comm_wait. Buffers must stay valid until then. `count` is elements of
 * `dt`. For bf16 reductions the sum is formed in fp32 and rounded to bf16
 * at every step, as NCCL does. Reductions are sums. */
/* recv (n*count) gets every rank's send (count) in rank order.
 * send may equal recv + rank*count (in place). */
int sl_comm_allgather(sl_comm *c, const void *send, void *recv, int64_t count, sl_dtype dt, sl_comm_req **req);
/* send (n*count) is summed across ranks; rank r receives block r (count).
 * recv may equal send + rank*count (in place). */
int sl_comm_reduce_scatter(sl_comm *c, const void *send, void *recv, int64_t count, sl_dtype dt, sl_comm_req **req);
/* buf (count) summed in place across ranks. */
int sl_comm_allreduce(sl_comm *c, void *buf, int64_t count, sl_dtype dt, sl_comm_req **req);
int sl_comm_broadcast(sl_comm *c, void *buf, int64_t count, sl_dtype dt, int root, sl_comm_req **req);
/* Paired point-to-point transfer (pipeline stages): send `count` elements of
 * dt to group rank `peer`; the matching sl_comm_recv on peer names this rank,
 * the same tag (0..32767) and the same dtype with at least `count` elements.
 * Messages between one pair with one tag arrive in issue order. Neither
 * blocks the caller nor the collectives queued behind it; each completes
 * through its request like a collective, and the watchdog (timeout_s of
 * sl_comm_world_init) aborts the job when one is not complete in time (the
 * peer never posted its half). A send to self (peer == rank) is matched with
 * a recv to self of the same tag (MPI, self; NCCL refuses it). */
int sl_comm_send(sl_comm *c, const void *buf, int64_t count, sl_dtype dt, int peer, int tag, sl_comm_req **req);
int sl_comm_recv(sl_comm *c, void *buf, int64_t count, sl_dtype dt, int peer, int tag, sl_comm_req **req);
int sl_comm_barrier(sl_comm *c, sl_comm_req **req);
/* All-to-all with per-peer counts (MPI_Alltoallv): this rank sends
 * scount[p] elements from send + sdispl[p] to group rank p and receives
 * rcount[p] elements from rank p at recv + rdispl[p]. Counts and
 * displacements are elements of dt, one entry per group rank, each in
 * [0, INT_MAX]; scount[rank] == rcount[rank] (the block to itself is a local
 * copy). The four arrays are copied at issue (the caller may reuse them at
 * once); the buffers must stay valid until the wait; send != recv. Every
 * rank's rcount[p] must equal rank p's scount[rank] (exchange the counts
 * first: an alltoallv of one SL_I64 per peer). The NCCL backend runs it as
 * one ncclGroupStart / ncclSend + ncclRecv per peer with a nonzero count /
 * ncclGroupEnd, the block to itself a device copy on the comm stream. */
int sl_comm_alltoallv(sl_comm *c, const void *send, const int64_t *scount, const int64_t *sdispl, void *recv,
                      const int64_t *rcount, const int64_t *rdispl, sl_dtype dt, sl_comm_req **req);

/* Blocks until req completes, then frees it. */
int sl_comm_wait(sl_comm_req *req);
/* The device-side form: orders the work queued on `stream` afterwards (a cudaStream_t; NULL = the
 * legacy default stream) after req, and gives req up. NCCL: the stream waits on req's completion
 * event (cudaStreamWaitEvent) and the call returns at once; the communicator's poller frees req when
 * it completes, and if it fails the communicator is broken: its next call fails naming the failed
 * operation (a failure found after the last call is printed at destroy). Only the stream is
 * ordered: the host and other streams must reach req's buffers through that stream's work (a
 * collective issued later on the same or another NCCL comm waits for the compute stream at issue;
 * a host read goes through a copy on it). Host backends (MPI, self, local, count): sl_comm_wait. */
int sl_comm_wait_stream(sl_comm_req *req, void *stream);
/* 1 if complete (req still valid until waited), 0 if not. */
int sl_comm_test(sl_comm_req *req);

/* Blocking convenience forms (issue + wait). */
int sl_comm_allreduce_sync(sl_comm *c, void *buf, int64_t count, sl_dtype dt);
int sl_comm_allgather_sync(sl_comm *c, const void *send, void *recv, int64_t count, sl_dtype dt);
int sl_comm_broadcast_sync(sl_comm *c, void *buf, int64_t count, sl_dtype dt, int root);
int sl_comm_barrier_sync(sl_comm *c);

/* The figure one operation adds to stats.bytes on one rank (n ranks, count
 * as passed to the call): allgather and reduce_scatter (count = the per-rank
 * block) (n-1)*count*size(dt); allreduce 2*(n-1)*ceil(count/n)*size(dt)
 * (= 2(n-1)/n of the buffer when n divides count; otherwise of the buffer
 * padded to a multiple of n, which is what moves); broadcast count*size(dt)
 * on the root (is_source), 0 elsewhere; send count*size(dt); recv
 * count*size(dt) (inbound; is_source ignored); barrier 0; alltoall (count =
 * the elements this rank sends to the OTHER ranks: the sum of scount[p]
 * over p != rank) count*size(dt): what crosses the wire. n == 1: always 0. */
uint64_t sl_comm_bus_bytes(sl_coll_kind k, int n, int64_t count, sl_dtype dt, int is_source);

void sl_comm_get_stats(const sl_comm *c, sl_comm_stats *out);
void sl_comm_reset_stats(sl_comm *c);
/* The calling thread's last error message: the same slot as sl_errmsg()
 * (base/base.h), so a later sl_fail on this thread replaces it. */
const char *sl_comm_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* SL_COMM_H */
