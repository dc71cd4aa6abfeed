/* formats/ckpt_io.h — the on-disk pieces of a training checkpoint, free of
 * any communication: the XXH64 checksum, the byte-plane shuffle + zstd frame
 * codec, the manifest (parse from memory / serialize), a per-rank shard file
 * writer, range reads with per-frame verification, and the commit / scan /
 * retention helpers on the checkpoint directory. engine/checkpoint.c drives
 * them collectively; tools/convert.c drives them from one process.
 * Layout and protocol: docs/checkpoint.md.
 */
#ifndef SL_CKPT_IO_H
#define SL_CKPT_IO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_CKIO_VERSION 1
#define SL_CKIO_NKINDS 3 /* master, exp_avg, exp_avg_sq */
extern const char *const sl_ckio_kind_names[SL_CKIO_NKINDS];

/* ---- XXH64 (the checksum of every file and frame) ---------------------- */
typedef struct {
  uint64_t v[4], total;
  uint8_t buf[32];
  int nbuf;
  uint64_t seed;
} sl_xxh64_state;
void sl_xxh64_init(sl_xxh64_state *s, uint64_t seed);
void sl_xxh64_update(sl_xxh64_state *s, const void *p, size_t n);
uint64_t sl_xxh64_digest(const sl_xxh64_state *s);
uint64_t sl_xxh64(const void *p, size_t n, uint64_t seed);

/* ---- manifest ------------------------------------------------------------ */
typedef struct {
  int64_t off, bytes, raw; /* byte offset and size in the file; raw = (hi-lo)*4 */
  int shuffle;             /* byte planes split before compression */
  int zstd;                /* 1: one zstd frame; 0: stored */
  uint64_t xxh;            /* XXH64 of the stored bytes */
} sl_ckio_frame;

typedef struct {
  int unit;
  int64_t lo, hi; /* element range of the unit's flat buffer */
  sl_ckio_frame fr[SL_CKIO_NKINDS];
} sl_ckio_piece;

typedef struct {
  char name[64]; /* rank-00003.bin */
  int rank;      /* world rank that wrote it */
  int64_t bytes;
  uint64_t xxh; /* XXH64 of the whole file */
  int npieces, cap;
  sl_ckio_piece *pieces;
} sl_ckio_file;

typedef struct {
  char name[128];
  int ndim;
  int64_t shape[3];
  int64_t offset, numel;
} sl_ckio_tensor;

typedef struct {
  char kind[32];
  int64_t numel, padded, shard; /* padded / shard of the writer's layout */
  int ntensors;
  sl_ckio_tensor *t;
} sl_ckio_unit;

typedef struct {
  int version;
  int64_t step, next_sample;
  uint64_t seed;
  int has_seed; /* 0: converted checkpoint, keep the run's seed */
  int world_size, zero, shard_group, replica_size;
  int64_t align;
  char compression[8]; /* "zstd" or "none" */
  char *config;        /* sl_train_cfg_canonical text (may be "") */
  char *model_config;  /* sl_model_canonical text (NULL: a manifest older than this field) */
  char model_hash[24]; /* its sl_canon_hash, 16 hex digits (written with model_config) */
  int nunits;
  sl_ckio_unit *units;
  int nfiles;
  sl_ckio_file *files;
  float *moe_bias;    /* (n_moe_bias) a mixture of experts' expert bias (--moe-balance bias); NULL: none */
  int64_t n_moe_bias; /* its L * E values */
} sl_ckio_manifest;

/* Parses and validates manifest JSON text (len bytes, need not be
 * 0-terminated): types, ranges, frame bounds, and that the pieces of every
 * unit tile [0, numel) exactly. path_for_msgs names the file in messages.
 * Fuzzing entry point. */
int sl_ckio_manifest_parse(const char *path_for_msgs, const char *text, size_t len, sl_ckio_manifest *out);
/* Serializes (malloc'd, 0-terminated) text. */
int sl_ckio_manifest_dump(const sl_ckio_manifest *m, char **text);
void sl_ckio_manifest_free(sl_ckio_manifest *m);
/* Serializes / parses a single file entry (how writers hand theirs to rank 0). */
int sl_ckio_file_dump(const sl_ckio_file *f, char **text);
int sl_ckio_file_parse(const char *text, size_t len, sl_ckio_file *out);
void sl_ckio_file_free(sl_ckio_file *f);

/* ---- writer: one shard file ------------------------------------------------ */
typedef struct {
  int fd;
  char path[4200];
  sl_ckio_file meta;
  sl_xxh64_state h;
  int shuffle; /* try the byte-plane shuffle (per frame, kept when smaller) */
  int level;   /* zstd level */
  int64_t raw_total, stored_total;
} sl_ckio_writer;

int sl_ckio_writer_open(sl_ckio_writer *w, const char *dir, int rank);
/* Appends unit u's elements [lo, hi) of master / m / v (each (hi-lo) floats;
 * m or v NULL: zeros). */
int sl_ckio_writer_add(sl_ckio_writer *w, int u, int64_t lo, int64_t hi, const float *master, const float *m,
                       const float *v);
/* fsyncs and closes; meta then holds size and checksum. */
int sl_ckio_writer_close(sl_ckio_writer *w);
void sl_ckio_writer_abort(sl_ckio_writer *w);

/* ---- reader ---------------------------------------------------------------- */
/* Fills dst (hi - lo floats) with elements [lo, hi) of unit u, kind k, from
 * the files of the checkpoint in dir (verifying each frame it reads). */
int sl_ckio_read_range(const char *dir, const sl_ckio_manifest *m, int u, int kind, int64_t lo, int64_t hi, float *dst);
/* Checks size and whole-file checksum of file i. */
int sl_ckio_verify_file(const char *dir, const sl_ckio_manifest *m, int i);
/* Reads DIR/manifest.json (and its checksum file) and parses it. */
int sl_ckio_manifest_load(const char *dir, sl_ckio_manifest *out);

/* ---- directory ------------------------------------------------------------- */
int sl_ckio_fsync_path(const char *path); /* file or directory */
/* Writes DIR/manifest.json + manifest.json.xxh64, fsynced. */
int sl_ckio_write_manifest(const char *dir, const sl_ckio_manifest *m);
/* Removes a directory holding plain files only (best effort, returns 0/-1). */
int sl_ckio_rmtree(const char *dir);
/* Removes CKPT_DIR/.tmp-* leftovers; returns how many. */
int sl_ckio_clean_tmp(const char *ckpt_dir);
/* Complete checkpoints (step-N directories holding manifest.json) sorted by
 * N, newest first. *steps malloc'd. */
int sl_ckio_list(const char *ckpt_dir, int64_t **steps, int *n);
/* Renames tmp -> CKPT_DIR/step-N (an existing step-N is replaced), fsyncs
 * CKPT_DIR, replaces CKPT_DIR/latest atomically. `fault` is called with the
 * stage name before each step (fault injection; may be NULL). */
int sl_ckio_commit(const char *ckpt_dir, const char *tmp, int64_t step, void (*fault)(const char *stage, void *ctx),
                   void *fault_ctx);
/* Deletes all but the newest keep complete checkpoints (keep <= 0: none). */
int sl_ckio_retain(const char *ckpt_dir, int keep);
void sl_ckio_step_dir(const char *ckpt_dir, int64_t step, char *out, size_t cap);
/* Resolves a path given to convert: a step directory (has manifest.json)
 * or a checkpoint directory (its newest complete step). */
int sl_ckio_resolve(const char *path, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* SL_CKPT_IO_H */
