/* base/base.h — what every layer shares: status codes with a message,
 * leveled logging (with a rank-0 form), monotonic time, polling back-off,
 * SplitMix64, checked allocation
 * and the named-arena byte accounting. No dependency on anything above.
 */
#ifndef SL_BASE_H
#define SL_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes --------------------------------------------------------
 * Library functions return 0 on success or one of these (positive) codes and
 * leave a message naming the file / tensor / field / rank at fault, what was
 * expected and what was found. tools/ turn SL_EINPUT into exit status 2. */
enum {
  SL_OK = 0,
  SL_EINTERNAL = 1,  /* a bug or an unexpected system failure */
  SL_EINPUT = 2,     /* bad user input: file, config, flag */
  SL_EIO = 3,        /* a read / write / fsync failed (ENOSPC, EIO, ...) */
  SL_ENOMEM = 4,     /* allocation failed */
  SL_ECOMM = 5,      /* a collective failed or timed out */
  SL_ENONFINITE = 6, /* a non-finite loss / gradient / state stopped the run (exit 4) */
};

/* Records the message (thread-local, printf format) and returns code. */
int sl_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with a va_list. The arguments may point into the current message
 * (sl_errmsg()): it is formatted aside first. */
int sl_vfail(int code, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Prefixes the current message with more context ("while loading X: ..."). */
int sl_fail_ctx(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *sl_errmsg(void);
void sl_clear_error(void);

/* ---- logging ------------------------------------------------------------ */
enum { SL_LOG_ERROR = 0, SL_LOG_WARN = 1, SL_LOG_INFO = 2, SL_LOG_DEBUG = 3 };
void sl_log_set_level(int level);          /* default: SL_LOG env or INFO */
int sl_log_get_level(void);                /* the level in force */
void sl_log_set_rank(int rank, int world); /* prefix "[rank r]" when world>1 */
void sl_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Logs only on rank 0. */
void sl_log0(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- time ----------------------------------------------------------------- */
uint64_t sl_now_ns(void); /* CLOCK_MONOTONIC */
double sl_now_s(void);
void sl_sleep_us(long us);
/* Back-off for polling loops: the first `spin` calls return at once
 * (sched_yield when `yield`), then each sleeps first_us, doubling
 * `doublings` times, never more than max_us. *spins starts at 0; reset it to
 * 0 when the loop makes progress. */
typedef struct {
  int spin, yield;
  long first_us;
  int doublings;
  long max_us;
} sl_backoff_policy;
void sl_backoff(int *spins, const sl_backoff_policy *p);

/* ---- SplitMix64 ------------------------------------------------------------ */
/* The SplitMix64 finaliser of z (a bijective 64-bit mix). */
uint64_t sl_mix64(uint64_t z);
/* Next value of the SplitMix64 stream with state *s (Steele et al. 2014). */
uint64_t sl_splitmix64(uint64_t *s);

/* ---- memory --------------------------------------------------------------- */
/* 64-byte aligned, zeroed. NULL on failure (message set). */
void *sl_alloc(size_t bytes, const char *what);
void sl_free(void *p);

/* ---- arenas: every byte belongs to a named arena -------------------------- */
typedef enum {
  SL_ARENA_PARAMS = 0, /* parameter shards (or full params at ZeRO 0-2) */
  SL_ARENA_GRADS,      /* gradient shards / full grads */
  SL_ARENA_OPTIM,      /* fp32 master, Adam m, v */
  SL_ARENA_GATHER,     /* all-gather buffers of units in flight */
  SL_ARENA_ACTS,       /* activations kept for backward */
  SL_ARENA_WORKSPACE,  /* scratch */
  SL_ARENA_HOST_OPTIM, /* offloaded optimizer state in host memory */
  SL_ARENA_SCRATCH,    /* the kernels' own scratch (high-water, reported by the backend) */
  SL_ARENA_COUNT
} sl_arena;
const char *sl_arena_name(sl_arena a);
typedef struct {
  int64_t cur[SL_ARENA_COUNT];
  int64_t peak[SL_ARENA_COUNT];
  int64_t total_cur, total_peak; /* over all arenas at once */
} sl_mem_stats;
/* Accounting only (the caller owns the memory). Thread-safe. */
void sl_mem_add(sl_arena a, int64_t bytes);
void sl_mem_sub(sl_arena a, int64_t bytes);
/* Sets an arena's current bytes (for pools whose high-water is tracked elsewhere). */
void sl_mem_set(sl_arena a, int64_t bytes);
void sl_mem_get(sl_mem_stats *out);
void sl_mem_reset_peaks(void); /* peak := current */
/* Puts back stats taken with sl_mem_get (a planner run inside a process
 * that counts its own arenas leaves them as it found them). */
void sl_mem_restore(const sl_mem_stats *s);

/* ---- files ----------------------------------------------------------------- */
/* Writes all n bytes (retrying short writes); SL_EIO naming path on failure. */
int sl_write_all(int fd, const void *p, size_t n, const char *path);
/* fsyncs the directory holding path (after a rename into it). */
void sl_fsync_parent(const char *path);
/* mkdir -p; SL_EIO naming the directory on failure. */
int sl_mkdirs(const char *dir);
/* path := text, atomically: written to PATH.tmp.PID, fsynced, renamed over
 * path, the directory fsynced; SL_EIO naming the file on failure (the
 * temporary removed). */
int sl_write_text_atomic(const char *path, const char *text);

#ifdef __cplusplus
}
#endif
#endif /* SL_BASE_H */
