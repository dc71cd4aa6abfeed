/* formats/metrics.h — the per-step metrics JSONL file of a run (rank 0):
 * opening it (a fresh run truncates; a resumed run keeps only the lines of
 * the steps the checkpoint holds, so no step appears twice), checked writes
 * (a full disk ends the run naming the file), fsync before a checkpoint. */
#ifndef SL_METRICS_H
#define SL_METRICS_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* keep_upto < 0: a fresh run (the file is emptied). Otherwise the lines whose
 * "step" is <= keep_upto are kept (a line cut by a crash is dropped), the
 * file rewritten atomically, and opened for appending. */
int sl_metrics_open(const char *path, int64_t keep_upto, FILE **out);
/* Flushes after a line; SL_EIO naming path when any write failed. */
int sl_metrics_flush(FILE *f, const char *path);
/* Flush + fsync (before a checkpoint commits the step). */
int sl_metrics_sync(FILE *f, const char *path);
/* Closes (*f = NULL); SL_EIO naming path on a failed write or close. */
int sl_metrics_close(FILE **f, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* SL_METRICS_H */
