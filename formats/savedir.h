/* formats/savedir.h — replacing a whole output directory atomically (an HF
 * model directory written by --save or convert --to-hf): the new content is
 * written under a temporary sibling name, fsynced, and swapped in; a failure
 * (a full disk) leaves the old directory as it was. */
#ifndef SL_SAVEDIR_H
#define SL_SAVEDIR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the temporary sibling PARENT/.NAME.tmp-<pid>-<n> of dir (PARENT is
 * created when missing; such siblings of processes that are gone are
 * removed first) and writes its path to tmp. SL_EINPUT when dir exists
 * and is not a directory. */
int sl_savedir_begin(const char *dir, char *tmp, size_t cap);
/* Files of an existing dir that the new content does not hold (a tokenizer,
 * a README; not weight files) are carried over; everything in tmp is fsynced;
 * tmp replaces dir (renameat2 RENAME_EXCHANGE, or two renames), the parent is
 * fsynced and the old content removed. On failure tmp is removed and dir is
 * untouched. */
int sl_savedir_commit(const char *dir, const char *tmp);
/* Removes tmp after a failed write. */
void sl_savedir_abort(const char *tmp);

#ifdef __cplusplus
}
#endif
#endif /* SL_SAVEDIR_H */
