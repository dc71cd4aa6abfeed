/* engine/rundir.h — a run's claim on its --ckpt-dir: an exclusive lock held
 * for the run's life (a second run on the directory is refused), and the
 * rule that a fresh run (no --resume) does not start in a directory that
 * already holds checkpoints (README "Failure behaviour"). */
#ifndef SL_RUNDIR_H
#define SL_RUNDIR_H

#include "formats/traincfg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates ckpt_dir when missing, takes flock(LOCK_EX) on CKPT_DIR/.lock
 * (*lock_fd: keep open for the run's life; closing releases it). Without
 * resume, any complete checkpoint (step-N/manifest.json) there belongs to
 * another run: SL_EINPUT naming --resume or a new directory. A held lock:
 * SL_EINPUT naming the directory. */
int sl_rundir_claim(const char *ckpt_dir, int resume, int *lock_fd);
void sl_rundir_release(int *lock_fd);

/* Rank 0, once OUT_DIR exists: writes OUT_DIR/run.json (every setting after
 * defaults, as --config reads it back, with the build and the model's
 * config hash), points runs/latest at OUT_DIR when the run directory was
 * chosen by default (a symlink replaced atomically; an old runs/latest that
 * is a real directory is left alone, with a warning), and records OUT_DIR in
 * CKPT_DIR/run-dir so that --resume appends to this run's files. Written
 * atomically (temporary name, fsync, rename). */
int sl_rundir_record(const sl_train_cfg *c, const char *model_hash);

#ifdef __cplusplus
}
#endif
#endif /* SL_RUNDIR_H */
