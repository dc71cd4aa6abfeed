/* engine/signals.c — graceful stop on SIGTERM / SIGINT: the handler records
 * the signal (async-signal-safe: one sig_atomic_t), the trainer asks once per
 * step through sl_signals_agree, so every rank stops after the same step even
 * when the signal reaches the ranks at different moments. */
#define _GNU_SOURCE
#include "engine/signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

static volatile sig_atomic_t pending; /* signal number, 0 = none */
static int stopped;                   /* agreed signal the run stopped on */
static int installed;

static void on_signal(int sig) {
  if (pending == sig) _exit(128 + sig); /* the same signal again: stop now */
  if (pending != SIGTERM) pending = sig;
}

void sl_signals_install(void) {
  if (installed) return;
  installed = 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

int sl_signals_pending(void) { return (int)pending; }

int sl_signals_stopped(void) { return stopped; }

const char *sl_signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "signal"; }

int sl_signals_agree(sl_comm *world, int *sig) {
  int s = (int)pending;
  int32_t v[2] = {s == SIGTERM, s == SIGINT}; /* summed: how many ranks saw each */
  *sig = 0;
  if (sl_comm_size(world) > 1 && sl_comm_allreduce_sync(world, v, 2, SL_I32) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "agreeing on a stop signal: %s", sl_comm_last_error());
  *sig = v[0] ? SIGTERM : v[1] ? SIGINT : 0;
  if (*sig) stopped = *sig;
  return SL_OK;
}
