#!/usr/bin/env bash
# Build every world of the study, one at a time (resumable: a world whose build_report.json exists
# is skipped). Logs to runs/worlds-build/<world>.log; the wall time and the load average at start
# and end go to runs/worlds-build/times.tsv (the machine may be shared: the load says how much).
#   nohup benchmarks/validity/worlds/build_worlds.sh [WORLD ...] > runs/worlds-build.log 2>&1 &
set -u
cd "$(dirname "$0")/../../.."
LOGS=runs/worlds-build
mkdir -p "$LOGS"
WORLDS=("$@")
[ ${#WORLDS[@]} -eq 0 ] && WORLDS=(capacity style rule_vs_instance forgetting diversity)
for w in "${WORLDS[@]}"; do
  if [ -f "sample_data/worlds/$w/models/build_report.json" ]; then echo "$w: built already"; continue; fi
  start=$(date +%s); load0=$(cut -d' ' -f1 /proc/loadavg)
  echo "$(date -u +%H:%M:%S) building $w"
  python -m opsd_diag.cli zoo build --world "sample_data/worlds/$w.yaml" > "$LOGS/$w.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\t%s\n' "$w" "$rc" "$(( $(date +%s) - start ))" "$load0" "$(cut -d' ' -f1 /proc/loadavg)" >> "$LOGS/times.tsv"
  echo "$(date -u +%H:%M:%S) $w finished with status $rc"
done
