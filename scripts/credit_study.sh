#!/usr/bin/env bash
# The committed credit-assignment studies (results/credit/README.md) in one command:
#
#   bash scripts/credit_study.sh [OUT]        # OUT defaults to results/credit
#
# Trains the CPU default once unless its run is done (G2PO, seed 0, 54 iterations,
# 10 to 25 minutes on 2 cores; the run id is fixed so the study finds it again: the same episodes as
# the comparison's G2PO seed 0), then runs the two `g2po credit` studies of the README at the default
# horizon (the warm start and the trained policy; 208 task groups x 8 rollouts, K = 16, both
# instruments; about 26 minutes each on an unshared 2-core VM, 36-40 on a shared one; on a cluster
# the sweep specs credit_trained/credit_warm_start shard them) and prints them side by side. With
# LONG_STUDIES=1 it also runs the long-horizon pair (step limit 30, K = 4; 22 and 47 minutes at 32 groups).
# A study whose folder already holds a credit.json is kept, so a stopped run of this script
# continues where it stopped. N_GROUPS, K and K_LONG override the sizes (e.g. N_GROUPS=2 K=2 for a
# quick try).
set -euo pipefail

OUT=${1:-results/credit}
RUN=${RUN:-results/runs/alfworld-g2po-s0-credit}
N_GROUPS=${N_GROUPS:-208}
N_GROUPS_LONG=${N_GROUPS_LONG:-32}
K=${K:-16}
K_LONG=${K_LONG:-4}
LONG=(env.max_steps=30 env.generated_max_receptacles=3 env.stop_after_refusals=0
      env.generated_train_games=320 env.generated_eval_games=40)

# trains (or finishes: resume=true continues a stopped run) the policy unless its run is done
state=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("state"))' "$RUN/status.json" 2>/dev/null || true)
if [ "$state" != done ]; then
  g2po train run_id="$(basename "$RUN")" output_dir="$(dirname "$RUN")" resume=true
fi

study() {  # study NAME GROUPS ARGS...: one g2po credit study into OUT/NAME unless it is there
  local name=$1 groups=$2; shift 2
  if [ -f "$OUT/$name/credit.json" ]; then
    echo "$OUT/$name: kept (credit.json exists)"
  else
    g2po credit --groups "$groups" --out "$OUT/$name" "$@"
  fi
}

study "warm_start-h15-g$N_GROUPS" "$N_GROUPS" --continuations "$K"
study "g2po54-h15-g$N_GROUPS" "$N_GROUPS" --run "$RUN" --continuations "$K"
for s in "warm_start-h15-g$N_GROUPS" "g2po54-h15-g$N_GROUPS"; do
  python3 scripts/credit_vs_end_to_end.py "$OUT/$s" > "$OUT/$s/vs_end_to_end.md"
done
if [ "${LONG_STUDIES:-0}" = 1 ]; then
  study g2po54-h30 "$N_GROUPS_LONG" --run "$RUN" --continuations "$K_LONG" "${LONG[@]}"
  # the long horizon's scenes would build another warm start: give the default's explicitly
  WARM=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['policy']['path'])" \
         "$OUT/warm_start-h15-g$N_GROUPS/credit.json")
  study warm_start-h30 "$N_GROUPS_LONG" --continuations "$K_LONG" model.path="$WARM" "${LONG[@]}"
fi
python3 scripts/credit_summary.py "$OUT"
