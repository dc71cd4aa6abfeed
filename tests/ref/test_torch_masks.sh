#!/usr/bin/env bash
# Loss masks (PREFIX.lmask) and --doc-attention-mask vs the PyTorch oracle,
# at 1, 2 and 3 ranks (tests/ref/mask_checks.py). Needs
# $SL_BUILD/shardlm, mpirun and /usr/bin/python3 with torch; exits 77
# (skipped) otherwise. SL_KEEP=1 keeps the work directory.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_masks mask_checks.py mpi
