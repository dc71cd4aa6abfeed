/* shard/comm_internal.h — what comm backends share (not for use outside
 * shard/): the operation descriptor a public call turns into, the request
 * (completion flag + status, waited on through its communicator's condvar),
 * the backend vtable and the communicator header every backend embeds.
 *
 * comm.c owns the public entry points, argument checks, sequence numbers,
 * statistics and the registry; the world backend (self in comm_self.c, or
 * MPI in comm_mpi.c, a dlopen'ed module) owns the world and the watchdog. A backend that starts its
 * operations itself (NCCL, comm_nccl.c: kernels on a CUDA stream instead of a
 * progress thread) sets the optional vtable hooks below; submit() then hands
 * it the checked request instead of queueing it, and sl_comm_wait / test
 * defer to it. Such a backend uses head..tail as its FIFO of operations in
 * flight (issued, not yet complete) and keeps `running` pointing at the
 * oldest incomplete collective, stamped when it became the oldest, so the
 * one watchdog serves every backend.
 */
#ifndef SL_COMM_INTERNAL_H
#define SL_COMM_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "shard/comm.h"

/* Internal operation kinds beyond sl_coll_kind (never counted in stats). */
enum {
  SL_OPK_SPLIT = SL_COLL_NKINDS, /* sl_comm_split, ordered like a collective */
  SL_OPK_QUIT,                   /* stops the progress thread (destroy) */
};

/* One queued operation: exactly the arguments of the public call. */
typedef struct sl_comm_op {
  int kind;         /* sl_coll_kind or SL_OPK_* */
  const void *send; /* allgather (count), reduce_scatter (n*count), send */
  void *recv;       /* allgather (n*count), reduce_scatter (count), allreduce/bcast/recv buffer */
  int64_t count;    /* elements of dt, as in the public call (alltoall: the sum of scount, for messages) */
  sl_dtype dt;
  int peer;       /* broadcast root, send/recv peer (group ranks) */
  int tag;        /* send/recv tag */
  int color, key; /* split */
  sl_comm **split_out;
  int64_t *a2a; /* alltoall: 4 x size entries, scount, sdispl, rcount, rdispl (the request's own copy,
                 * stored after it: freed with it); NULL otherwise */
  uint64_t seq; /* collectives: per-comm sequence number from 1; p2p: own counter */
} sl_comm_op;

struct sl_comm_req {
  sl_comm *c;
  sl_comm_op op;
  int done;                 /* guarded by c->mu; set once, then c->cv_done broadcast */
  int status;               /* SL_COMM_OK / SL_COMM_ERR */
  char err[512];            /* message when status != OK */
  uint64_t start_ns;        /* when the progress engine started it (watchdog) */
  struct sl_comm_req *next; /* FIFO link while queued */
  void *be;                 /* backend per-request state (NCCL: completion cudaEvent_t) */
  int detached;             /* guarded by c->mu: given up by sl_comm_wait_stream; the backend frees it */
};

typedef struct sl_comm_vt {
  const char *name;            /* "mpi" / "nccl" */
  void (*destroy)(sl_comm *c); /* drain, stop progress, free be */
  /* Optional (NULL for MPI). issue: start the checked request r now (r->op
   * filled in, seq not yet assigned: call sl_comm_account in issue order);
   * SL_COMM_OK, or SL_COMM_ERR with the message set (submit frees r). */
  int (*issue)(sl_comm *c, sl_comm_req *r);
  int (*wait)(sl_comm_req *r); /* sl_comm_wait: complete, account, free r */
  int (*test)(sl_comm_req *r); /* sl_comm_test */
  int (*wait_stream)(sl_comm_req *r, void *stream); /* sl_comm_wait_stream; NULL: sl_comm_wait */
  void (*abort)(sl_comm *c);   /* watchdog, before MPI_Abort: abort transport */
} sl_comm_vt;

/* The communicator: generic part. The FIFO (head..tail) is consumed by the
 * backend's progress engine; everything below mu is guarded by it. */
struct sl_comm {
  const sl_comm_vt *vt;
  char name[96];    /* "world", "world/s1c0", ... (messages) */
  int rank, size;   /* in this group */
  int *world_ranks; /* (size) world rank of each group rank */
  uint64_t uid;     /* same on every member; unique within a process */
  pthread_mutex_t mu;
  pthread_cond_t cv_work;   /* progress engine: queue not empty */
  pthread_cond_t cv_done;   /* some request completed */
  sl_comm_req *head, *tail; /* FIFO of issued, not yet started operations */
  uint64_t issued_seq;      /* collectives issued so far (= seq of the last one) */
  uint64_t p2p_seq;         /* sends/recvs issued so far */
  int broken;               /* an operation failed: later ones fail at once */
  int quitting;
  sl_comm_req *running;    /* collective the engine is executing (watchdog) */
  sl_comm_req *p2p_oldest; /* oldest send/recv in flight, stamped start_ns (watchdog;
                            * backends that run p2p beside collectives: MPI) */
  sl_comm_stats stats;
  void *be; /* backend state */
};

/* Fills the generic header of a new communicator c (zeroed by the caller):
 * vt, backend state, name, rank / size, world_ranks (taken over, freed by
 * sl_comm_fini), uid, and the lock and condition variables. sl_comm_fini
 * destroys them and frees world_ranks, be and c (backends without their own
 * teardown: self, count). */
void sl_comm_init_header(sl_comm *c, const sl_comm_vt *vt, void *be, const char *name, int rank, int size,
                         int *world_ranks, uint64_t uid);
void sl_comm_fini(sl_comm *c);

/* Bytes per rank for one operation; see sl_comm_bus_bytes in comm.h. */
uint64_t sl_comm_op_bytes(const sl_comm_op *op, int rank, int n);

/* ---- shared with backends that issue operations themselves (comm_mpi.c) -- */
/* Sets sl_comm_last_error (and sl_fail's message); returns SL_COMM_ERR. */
int sl_comm_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Assigns r->op.seq and counts r in c->stats, under c->mu: exactly what
 * submit does for a queued request. */
void sl_comm_account(sl_comm *c, sl_comm_req *r);
/* 1 for collectives (watched, sequence-numbered), 0 for send/recv. */
int sl_comm_is_coll(int kind);
/* Watchdog registry: a registered comm is watched (c->running) and answers
 * the peers' status queries by c->uid. */
void sl_comm_register(sl_comm *c);
void sl_comm_unregister(sl_comm *c);
uint64_t sl_comm_now_ns(void); /* CLOCK_MONOTONIC */
/* uid of the child a split (sequence number seq) makes of a comm with uid
 * parent_uid: equal on every member, distinct per split within a process.
 * Backends set their own low bits on it (MPI, self: |1; NCCL: &~1 |2). */
uint64_t sl_comm_child_uid(uint64_t parent_uid, uint64_t seq);
/* Registry walk (the MPI watchdog): under the lock, entries 0..size-1. */
void sl_comm_registry_lock(void);
void sl_comm_registry_unlock(void);
int sl_comm_registry_size(void);
sl_comm *sl_comm_registry_at(int i);

/* ---- world backends ---------------------------------------------------- */
/* What comm.c needs of a world backend. The MPI module (libsl_comm_mpi.so)
 * exports `const sl_comm_world_be *sl_comm_mpi_entry(void)`; its abi must
 * equal SL_COMM_WORLD_ABI (a module from another build is refused). The
 * module calls back into the executable's comm.c / base.c symbols, which
 * every executable exports (-rdynamic, shard/CMakeLists.txt). */
#define SL_COMM_WORLD_ABI (0x534c0000 + (int)sizeof(struct sl_comm) + 0x100 * (int)sizeof(struct sl_comm_req))
typedef struct {
  int abi;
  const char *name; /* "mpi" / "self" */
  int (*world_init)(int *argc, char ***argv, double timeout_s, sl_comm **world);
  void (*world_finalize)(void);
  void (*abort)(int code); /* ends every rank; does not return */
} sl_comm_world_be;

/* The single-process world (comm_self.c). */
extern const sl_comm_world_be sl_comm_self_world;
int sl_comm_self_world_init(sl_comm **world);

#endif /* SL_COMM_INTERNAL_H */
