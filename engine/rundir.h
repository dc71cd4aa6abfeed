/* engine/rundir.h — a run's claim on its --ckpt-dir: an exclusive lock held
 * for the run's life (a second run on the directory is refused), and the
 * rule that a fresh run (no --resume) does not start in a directory that
 * already holds checkpoints (README "Failure behaviour"). */
#ifndef SL_RUNDIR_H
#define SL_RUNDIR_H

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

#ifdef __cplusplus
}
#endif
#endif /* SL_RUNDIR_H */
