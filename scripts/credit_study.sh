#!/usr/bin/env bash
# The committed credit-assignment study (results/credit/README.md) in one command:
#
#   bash scripts/credit_study.sh [OUT]        # OUT defaults to results/credit
#
# Trains the CPU default once when its run folder has no checkpoint (G2PO, seed 0, 54 iterations,
# about 15 minutes on 2 cores; the run id is fixed so the study finds it again), then runs the four
# `g2po credit` studies of the README (the warm start and the trained policy, at the default
# horizon with K = 16 and at the long one with K = 4; 32 task groups x 8 rollouts each; about
# 7 + 5 + 22 + 25 minutes on 2 cores) and prints them side by side. A study whose folder already
# holds a credit.json is kept, so a stopped run of this script continues where it stopped.
# N_GROUPS, K and K_LONG override the sizes (e.g. N_GROUPS=2 K=2 K_LONG=2 for a quick try).
set -euo pipefail

OUT=${1:-results/credit}
RUN=${RUN:-results/runs/alfworld-g2po-s0-credit}
N_GROUPS=${N_GROUPS:-32}
K=${K:-16}
K_LONG=${K_LONG:-4}
LONG=(env.max_steps=30 env.generated_max_receptacles=3 env.stop_after_refusals=0
      env.generated_train_games=320 env.generated_eval_games=40)

if [ ! -f "$RUN/checkpoints/latest/policy/model.safetensors" ]; then
  # the cut the committed study's policy was trained with (the default before train.mini_batch_split=auto)
  g2po train run_id="$(basename "$RUN")" output_dir="$(dirname "$RUN")" train.mini_batch_split=fixed
fi

study() {  # study NAME ARGS...: one g2po credit study into OUT/NAME unless it is there
  local name=$1; shift
  if [ -f "$OUT/$name/credit.json" ]; then
    echo "$OUT/$name: kept (credit.json exists)"
  else
    g2po credit --groups "$N_GROUPS" --out "$OUT/$name" "$@"
  fi
}

study warm_start-h15 --continuations "$K"
study g2po54-h15 --run "$RUN" --continuations "$K"
study g2po54-h30 --run "$RUN" --continuations "$K_LONG" "${LONG[@]}"
# the long horizon's scenes would build another warm start: give the default's explicitly
WARM=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['policy']['path'])" \
       "$OUT/warm_start-h15/credit.json")
study warm_start-h30 --continuations "$K_LONG" model.path="$WARM" "${LONG[@]}"
python3 scripts/credit_summary.py "$OUT"
