/* engine/signals.h — graceful stop on SIGTERM / SIGINT (Slurm pre-emption,
 * Ctrl-C, the --max-restarts supervisor). The handler only records the
 * signal; the trainer polls it once per step, all ranks agree (one tiny
 * all-reduce) on stopping after the same step, write a checkpoint and the
 * CLI exits 128 + signal (143 SIGTERM, 130 SIGINT). */
#ifndef SL_ENGINE_SIGNALS_H
#define SL_ENGINE_SIGNALS_H

#include "shard/comm.h"

/* Installs the SIGTERM/SIGINT handlers (idempotent). The same signal a
 * second time while the first is pending ends the process at once with
 * 128 + signal (no checkpoint): the user insisted. */
void sl_signals_install(void);
/* The signal received on this rank and not yet acted on (0: none). */
int sl_signals_pending(void);
/* Collective: every rank calls it after the same step. *sig = the signal
 * the job stops on (SIGTERM wins over SIGINT when ranks saw different ones),
 * 0 = keep training. Records it for sl_signals_stopped(). */
int sl_signals_agree(sl_comm *world, int *sig);
/* The signal the run stopped on (0: it did not stop on a signal). */
int sl_signals_stopped(void);
/* "SIGTERM" / "SIGINT". */
const char *sl_signal_name(int sig);

#endif
