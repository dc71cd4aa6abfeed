/* tools/plan_pp.h — shardlm plan --engine-check --pp P (tools/plan_pp.c). */
#ifndef SL_TOOLS_PLAN_PP_H
#define SL_TOOLS_PLAN_PP_H

#include "formats/hfconfig.h"
#include "formats/traincfg.h"

/* Prints the engine check of every pipeline stage of the run tc (tc->pp
 * >= 2) over `world` ranks: the dry run as DP rank 0, TP rank 0 of each
 * stage (text, or one JSON object with "stages"); SL_OK or the first
 * stage's failure (SL_EINPUT: train's refusal). */
int sl_plan_pp_check(const sl_model_config *mc, const sl_train_cfg *tc, int world, int as_json);

#endif
