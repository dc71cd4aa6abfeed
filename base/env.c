/* base/env.c — the SL_* environment table (base/env.h). A new knob: one row
 * here, read with sl_env_*; docs/cli.md "Environment variables read" says
 * where each one is read. */
#define _GNU_SOURCE
#include "base/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR SL_ENV_STR
#define INT SL_ENV_INT
#define DBL SL_ENV_DOUBLE
#define BOOL SL_ENV_BOOL

static const sl_env_row g_env[] = {
    {"SL_LOG", STR, "info", 0, "log level: error, warn, info or debug"},
    {"SL_COMM", STR, NULL, 0, "world backend: mpi or self; unset: mpi under mpirun/srun, else self"},
    {"SL_COMM_MPI_LIB", STR, NULL, 0,
     "path of libsl_comm_mpi.so; unset: beside the executable, one level up, the build tree, the loader path"},
    {"SL_RANK", INT, NULL, 0, "this process's rank when NCCL starts without MPI (else RANK, then SLURM_PROCID)"},
    {"SL_WORLD_SIZE", INT, NULL, 0, "the world size with SL_RANK (else WORLD_SIZE, then SLURM_NTASKS)"},
    {"SL_LOCAL_RANK", INT, NULL, 0, "the local rank with SL_RANK; unset: the rank"},
    {"SL_INIT_METHOD", STR, NULL, 0,
     "fs:PATH or tcp:HOST:PORT: how rank 0 hands out the NCCL id; unset: tcp:$MASTER_ADDR:$MASTER_PORT"},
    {"SL_JOB_SECRET", STR, NULL, 0,
     "at least 16 characters, the same on every rank: the key the NCCL rendezvous proves; unset: a 0600 key file "
     "(fs: PATH.key; tcp: $HOME/.shardlm/boot-key)"},
    {"SL_CUDA_DEVICE", INT, NULL, 0,
     "the CUDA ordinal of this rank; unset: the local rank (training), else the current device"},
    {"SL_CUDA_TF32", INT, "0", 0, "1: fp32 GEMMs on TF32 tensor cores (CUDA backend, bench gpu)"},
    {"SL_BENCH_COMPUTE", STR, NULL, 0,
     "fp32: bench gpu computes in strict fp32; unset: bf16 (TF32 with SL_CUDA_TF32=1)"},
    {"SL_ADAMW_ISA", STR, NULL, 0,
     "scalar, avx2 or avx512: caps the CPU AdamW SIMD path; unset: the widest the CPU has"},
    {"SL_NVME_BACKEND", STR, NULL, 0,
     "pread: the NVMe store uses a thread pool; unset: io_uring when the kernel grants it"},
    {"SL_BIND", STR, "1", 0, "0: bind no threads; else each rank's threads are bound to its cores"},
    {"SL_MESH_HOSTS", STR, NULL, 1, "a,a,b,b: pretend rank r runs on host r of the list; unset: the real hostnames"},
    {"SL_TTY", BOOL, NULL, 0, "1/0: rank 0 draws the progress line (set by --nproc); unset: isatty outside a launcher"},
    {"SL_STOP_GRACE", DBL, "600", 0, "seconds the ranks get to checkpoint after a forwarded signal (supervisor)"},
    {"SL_CKPT_ZSTD_LEVEL", INT, "3", 0, "zstd level of checkpoint blocks"},
    {"SL_CKPT_SHUFFLE", BOOL, "1", 0, "0: no byte shuffle before checkpoint compression"},
    {"SL_CKPT_DUMP", STR, NULL, 1, "FILE.safetensors: a successful checkpoint load also writes what it loaded"},
    {"SL_CKPT_FAULT", STR, NULL, 1, "STAGE: SIGKILL at that checkpoint save stage"},
    {"SL_CKPT_FAULT_RANK", INT, NULL, 1, "with SL_CKPT_FAULT: only on this rank; unset: every rank"},
    {"SL_CKPT_FAULT_STEP", INT, NULL, 1, "with SL_CKPT_FAULT: only at this step; unset: every step"},
    {"SL_CKPT_FAULT_ONCE", STR, NULL, 1, "with SL_CKPT_FAULT: a marker file; fire only when it does not exist yet"},
    {"SL_FAULT_EP_MISROUTE", BOOL, NULL, 1,
     "1: under --ep each rank runs the rows it receives through its experts in reverse order (a negative control)"},
    {"SL_ACT_FP32", BOOL, NULL, 1,
     "1: under --compute-dtype bf16 keep the activations in fp32 (the check that bf16 storage is lossless)"},
    {"SL_FAULT_ACT_BF16", BOOL, NULL, 1,
     "1: bf16 activation storage packs every kept buffer in bf16, fp32 statistics too (a negative control)"},
    {"SL_FAULT_M2_NORM_LOCAL", BOOL, NULL, 1,
     "1: Mamba-2's gated norm takes a group's statistics from this TP rank's channels alone when the group spans "
     "several ranks (n_groups < --tp; a negative control)"},
    {"SL_FAULT_NONFINITE", STR, NULL, 1, "S1[,S2...]: the loss of those steps (1-based) is NaN"},
    {"SL_FAULT_NONFINITE_RANK", INT, NULL, 1, "with SL_FAULT_NONFINITE: only on this rank; unset: every rank"},
    {"SL_TEST_GEMMA_OFF", STR, NULL, 1,
     "embed_scale, post_norms or plus_one: Gemma without that feature (negative controls); unset: none"},
};
enum { NENV = sizeof g_env / sizeof g_env[0] };

/* What the code reads from the launcher (or the system) with getenv where it
 * is needed: listed, not looked up. */
static const struct {
  const char *names, *by, *doc;
} g_launcher[] = {
    {"OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, SLURM_PROCID with SLURM_STEP_ID", "CLI",
     "already under a launcher: --nproc and --max-restarts do not start mpirun"},
    {"OMPI_COMM_WORLD_SIZE, PMI_RANK, PMI_SIZE, PMIX_RANK, MPI_LOCALNRANKS, SLURM_STEP_NUM_TASKS > 1", "comm",
     "a launcher started this process: the world is MPI"},
    {"SLURM_NTASKS, SLURM_STEP_ID", "CLI", "srun of several tasks without PMIX_RANK: refused (use srun --mpi=pmix)"},
    {"RANK, WORLD_SIZE, LOCAL_RANK, SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID", "NCCL bootstrap",
     "rank, world size and local rank when SL_RANK is unset"},
    {"MASTER_ADDR, MASTER_PORT", "NCCL bootstrap", "the rendezvous when SL_INIT_METHOD is unset"},
    {"HOME, SLURM_JOB_ID, TORCHELASTIC_RUN_ID", "NCCL bootstrap",
     "tcp without SL_JOB_SECRET: the per-user key $HOME/.shardlm/boot-key, keyed to the launcher's job id"},
    {"CUDA_DEVICE_ORDER", "CUDA backend",
     "set to PCI_BUS_ID unless set: the order the placement maps GPUs to cores by"},
    {"CUDA_VISIBLE_DEVICES", "placement", "numeric list: maps the ordinal to the physical GPU whose cores are used"},
    {"OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID",
     "start-up memory check", "ranks sharing this node's memory, and which one reports; unset: 1 rank per node"},
    {"TMPDIR", "bench adam|nvme", "where the NVMe benchmark file goes without --path; unset: /tmp"},
};

static const char *type_name(sl_env_type t) {
  return t == SL_ENV_INT ? "int" : t == SL_ENV_DOUBLE ? "double" : t == SL_ENV_BOOL ? "bool" : "string";
}

const sl_env_row *sl_env_table(int *n) {
  if (n) *n = NENV;
  return g_env;
}

static const sl_env_row *row(const char *name, int want_type) {
  for (int i = 0; name && i < NENV; i++) {
    if (strcmp(g_env[i].name, name)) continue;
    if (want_type >= 0 && (int)g_env[i].type != want_type) {
      fprintf(stderr,
              "shardlm: internal error: environment variable %s is a %s (base/env.c), read with the %s reader\n", name,
              type_name(g_env[i].type), type_name((sl_env_type)want_type));
      abort();
    }
    return &g_env[i];
  }
  fprintf(stderr, "shardlm: internal error: environment variable %s is not in the table of base/env.c\n",
          name ? name : "(null)");
  abort();
}

int sl_env_set(const char *name) { return getenv(row(name, -1)->name) != NULL; }

const char *sl_env_str(const char *name) {
  const sl_env_row *r = row(name, -1);
  const char *v = getenv(r->name);
  return v ? v : r->def;
}

static const char *typed(const char *name, sl_env_type t) {
  const sl_env_row *r = row(name, (int)t);
  const char *v = getenv(r->name);
  return v ? v : r->def;
}

long long sl_env_int(const char *name) {
  const char *v = typed(name, SL_ENV_INT);
  return v ? atoll(v) : 0;
}

double sl_env_double(const char *name) {
  const char *v = typed(name, SL_ENV_DOUBLE);
  return v ? atof(v) : 0;
}

int sl_env_bool(const char *name) {
  const char *v = typed(name, SL_ENV_BOOL);
  return v ? atoi(v) != 0 : 0;
}

int sl_env_put(const char *name, const char *value, int overwrite) {
  return setenv(row(name, -1)->name, value, overwrite);
}

void sl_env_print(FILE *f) {
  fprintf(f, "environment variables (base/env.c; [test]: a test / fault-injection hook, never set in a normal run)\n");
  fprintf(f, "  %-24s %-7s %-8s %s\n", "name", "type", "default", "meaning");
  for (int i = 0; i < NENV; i++)
    fprintf(f, "  %-24s %-7s %-8s %s%s\n", g_env[i].name, type_name(g_env[i].type), g_env[i].def ? g_env[i].def : "-",
            g_env[i].test ? "[test] " : "", g_env[i].doc);
  fprintf(f, "read from the launcher (or the system):\n");
  for (size_t i = 0; i < sizeof g_launcher / sizeof g_launcher[0]; i++)
    fprintf(f, "  %s (%s): %s\n", g_launcher[i].names, g_launcher[i].by, g_launcher[i].doc);
}
