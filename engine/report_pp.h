/* engine/report_pp.h — a pipeline-parallel run's schedule shown to people
 * (engine/report_pp.c): pipeline.svg in the out dir next to metrics.svg,
 * and `shardlm train --pp P --pp-dry-run` (docs/pipeline.md). The per-stage
 * figures of the metrics line (same file) are the trainer's own:
 * sl_trainer_pp_gather / sl_trainer_pp_write in engine/trainer_internal.h. */
#ifndef SL_REPORT_PP_H
#define SL_REPORT_PP_H

#include "engine/schedule_pp.h"
#include "formats/traincfg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes OUT_DIR/pipeline.svg (pipeline/render.c) of the run's schedule,
 * atomically; the path in svg[cap]. Called by world rank 0. */
int sl_pp_report_svg(const sl_train_cfg *c, const sl_pp_plan *p, char *svg, size_t cap);

/* --pp-dry-run: builds the run's schedule and layout from the model config
 * (the checks and refusals of training), prints on world rank 0 the
 * per-rank timeline, each rank's bubble and transfers and the layout,
 * writes pipeline.svg unless --plot false; trains nothing. world_rank:
 * the caller's rank (others print nothing). */
int sl_pp_dry_run(const sl_train_cfg *c, int world_rank);

#ifdef __cplusplus
}
#endif
#endif /* SL_REPORT_PP_H */
