/* shard/bootstrap.h — ranks that find each other without MPI.
 *
 * For single-node multi-GPU runs on a machine without OpenMPI: the ranks
 * and the world size come from the environment (as torchrun or srun set
 * them), and rank 0 hands a small blob (the ncclUniqueId) to every other
 * rank through a rendezvous, like llm.c's `fs` and `tcp` init methods, but
 * only to ranks that prove they hold the job's key:
 *   fs:PATH        rank 0 writes PATH (temp name, fsync, rename); the others
 *                  poll for it, read it and leave an acknowledgement
 *                  PATH.ack.<rank>; rank 0 returns once every rank has
 *                  acknowledged and removes PATH and the acks. Every file is
 *                  mode 0600 from its creation. PATH must be on a filesystem
 *                  every rank sees and fresh for each job (e.g. include
 *                  $SLURM_JOB_ID).
 *   tcp:HOST:PORT  rank 0 listens on HOST:PORT and serves every connection
 *                  at once: a rank proves the key (HMAC-SHA256 over a nonce
 *                  from each side), rank 0 proves it back with the blob, the
 *                  rank acknowledges. A connection that closes, sends
 *                  anything else or stays silent is dropped with one log
 *                  line naming its address and never fails the job.
 * The key: SL_JOB_SECRET (at least 16 characters, the same on every rank),
 * else for fs the key file PATH.key, else for tcp the per-user key file
 * $HOME/.shardlm/boot-key mixed with the launcher's job id; a key file is
 * made 0600 by whichever rank finds none. The blob is encrypted under the
 * key (a keystream of HMACs) in the file and on the wire, and authenticated.
 * A rank whose key differs fails at once with a message saying so; every
 * wait is bounded by the timeout. docs/comm.md, "NCCL without MPI",
 * describes the variables and the protocol (shard/bootstrap.c's header).
 */
#ifndef SL_BOOTSTRAP_H
#define SL_BOOTSTRAP_H

#include <stddef.h>

typedef struct sl_boot_env {
  int rank, size, local_rank; /* this process, the world, its rank on the node */
  char method[8];             /* "fs" or "tcp" */
  char addr[1024];            /* fs: the file path; tcp: "host:port" */
  char source[64];            /* which variables gave rank/size (messages) */
} sl_boot_env;

/* Reads the environment. Rank and size: SL_RANK + SL_WORLD_SIZE (+
 * SL_LOCAL_RANK), else RANK + WORLD_SIZE (+ LOCAL_RANK) as torchrun sets,
 * else SLURM_PROCID + SLURM_NTASKS (+ SLURM_LOCALID). Rendezvous:
 * SL_INIT_METHOD = "fs:PATH" | "tcp:HOST:PORT", else MASTER_ADDR +
 * MASTER_PORT (torchrun) as tcp. *found = 0 (and SL_OK) when no rank
 * variables are set. SL_EINPUT with a message naming the variable when a
 * value is malformed, out of range or the rendezvous is missing. */
int sl_boot_from_env(sl_boot_env *e, int *found);

/* Collective over the e->size ranks: rank 0's blob[0..n) is copied into
 * every other rank's blob. Every rank passes the same n. Reads the job key
 * (SL_JOB_SECRET or a key file) at each call. Waits at most timeout_s
 * seconds in all. SL_OK, SL_EINPUT (bad method/address, SL_JOB_SECRET too
 * short, tcp without a secret or HOME), SL_ECOMM (timeout, I/O error,
 * mismatched length or world, another key, a key file others may read)
 * with a message naming the rendezvous and what was missing. */
int sl_boot_share(const sl_boot_env *e, void *blob, size_t n, double timeout_s);

#endif /* SL_BOOTSTRAP_H */
