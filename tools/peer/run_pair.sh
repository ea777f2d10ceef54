#!/bin/bash
# One alternation round for one case: the peer (SimToolbox driver), then relcp_mpi; with PAUSE=1 a long-running
# tools/bench_colony.py job is paused (SIGSTOP) for the duration and always resumed (trap on EXIT/INT/TERM).
# Usage: tools/peer/run_pair.sh CASE [ROUND_TAG]      CASE in n2000c n8000c n2000 n10000
# Env: PEER_WORK (default /work/peer), STEPS (10), WARM (2), PEER_DRAG_TIPTOTIP (default 1), RELCP_EXTRA
#      (extra args of bench_peer_cases.py; default "--set contact.gap_margin=5e-4" for the dense cases c*),
#      PEER_ARGS (extra peer_bench args, e.g. --timers), PAUSE (1: pause a running tools/bench_colony.py meanwhile; default 0), ORDER ("peer relcp" or "relcp peer")
# Output: appended to $PEER_WORK/results/CASE.log (peer) and /tmp/peer_side.jsonl (relcp_mpi JSON lines).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CASE=$1; TAG=${2:-r}
PEER_WORK=${PEER_WORK:-/work/peer}
STEPS=${STEPS:-10}; WARM=${WARM:-2}
export PEER_DRAG_TIPTOTIP=${PEER_DRAG_TIPTOTIP:-1}
ORDER=${ORDER:-"peer relcp"}
case $CASE in *c) DEFEXTRA="--set contact.gap_margin=5e-4";; *) DEFEXTRA="";; esac
RELCP_EXTRA=${RELCP_EXTRA-$DEFEXTRA}
mkdir -p $PEER_WORK/results
LOG=$PEER_WORK/results/$CASE.log
PIDS=""
if [ "${PAUSE:-0}" = 1 ]; then
  PIDS=$(pgrep -f 'tools/bench_colony[.]py' | grep -v -w -e $$ -e $PPID | tr '\n' ' ')
fi
resume() { [ -n "$PIDS" ] && kill -CONT $PIDS 2>/dev/null; echo "resumed: $PIDS at $(date -u +%T)"; }
trap resume EXIT
trap 'exit 130' INT TERM
if [ -n "$PIDS" ]; then kill -STOP $PIDS; echo "paused bench_colony pids: $PIDS at $(date -u +%T)"; fi
sleep 2
for who in $ORDER; do
  echo "=== $who $CASE $TAG  $(date -u '+%F %T UTC')  loadavg $(cat /proc/loadavg)" | tee -a $LOG
  if [ $who = peer ]; then
    ( cd $PEER_WORK/cases/$CASE && OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 280 $PEER_WORK/build/peer_bench RunConfig.yaml \
        SylinderInitial.dat --warm $WARM --steps $STEPS --force 0 0 -5 ${PEER_ARGS:-} ) 2>&1 | grep -E "STEP|SUMMARY|INIT|rror|Timer Name|^SylinderSystem|^[-=]{20}|^Belos|^Tpetra" | tee -a $LOG
  else
    ( cd "$ROOT" && source tools/env.sh && OMP_NUM_THREADS=1 timeout 280 .venv/bin/python tools/bench_peer_cases.py \
        --cases $CASE --steps $STEPS --warm $WARM $RELCP_EXTRA --json /tmp/peer_side.jsonl ) 2>&1 | tee -a $LOG
  fi
  echo "--- end $who $CASE $TAG $(date -u '+%F %T UTC') loadavg $(cat /proc/loadavg)" | tee -a $LOG
done
