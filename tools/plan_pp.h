/* tools/plan_pp.h — shardlm plan --engine-check --pp P (tools/plan_pp.c). */
#ifndef SL_TOOLS_PLAN_PP_H
#define SL_TOOLS_PLAN_PP_H

#include "engine/pp_check.h"

/* Prints the engine check of every stage of run r under pipeline flags pc
 * (text, or one JSON object with "stages"); SL_OK or the first stage's
 * failure (SL_EINPUT: train's refusal). */
int sl_plan_pp_check(const sl_model_config *mc, const sl_plan_run *r, const sl_pp_check_cfg *pc, int as_json);

#endif
