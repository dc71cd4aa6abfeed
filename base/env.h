/* base/env.h — the one table of SL_* environment variables (base/env.c), in
 * the manner of NCCL's param.h: every knob the library and the tools read is
 * one row (name, type, default, one-line doc, test-only flag), and the code
 * reads it only through the functions below, which look the name up in the
 * table. A name that is not in the table is a programming error: the process
 * aborts with a message, so a new knob cannot bypass the table. The
 * launchers' own variables (OMPI_*, SLURM_*, CUDA_VISIBLE_DEVICES, ...) are
 * read with getenv where they are needed; sl_env_print lists them too.
 * `shardlm --help-env` prints the table.
 *
 * Values are parsed as the code always parsed them (atoll / atof / atoi != 0,
 * no range check): the table moved the names, not the behaviour.
 */
#ifndef SL_BASE_ENV_H
#define SL_BASE_ENV_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SL_ENV_STR, SL_ENV_INT, SL_ENV_DOUBLE, SL_ENV_BOOL } sl_env_type;

typedef struct {
  const char *name;
  sl_env_type type;
  const char *def; /* the value used while unset (parsed like a set value); NULL: none */
  int test;        /* 1: a test / fault-injection hook, never set in a normal run */
  const char *doc; /* one line: what it does, what "unset" means when def is NULL */
} sl_env_row;

/* The table, and its number of rows. */
const sl_env_row *sl_env_table(int *n);

/* 1 when NAME is in the environment (even as ""). */
int sl_env_set(const char *name);
/* The value of NAME, else the row's default (NULL when it has none). Any type. */
const char *sl_env_str(const char *name);
/* atoll of the value or the default (0 when neither); an SL_ENV_INT row. */
long long sl_env_int(const char *name);
/* atof of the value or the default (0 when neither); an SL_ENV_DOUBLE row. */
double sl_env_double(const char *name);
/* atoi(value or default) != 0 (0 when neither); an SL_ENV_BOOL row. */
int sl_env_bool(const char *name);
/* setenv(NAME, value, overwrite) for a name of the table (a child's knob). */
int sl_env_put(const char *name, const char *value, int overwrite);

/* The table (name, type, default, doc; test hooks marked), then the
 * variables read from the launcher. */
void sl_env_print(FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* SL_BASE_ENV_H */
