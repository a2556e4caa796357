#!/bin/sh
# train_signal.sh KILN WORK SIGNAL EXPECTED_STATUS
# Runs `kiln train` (compiled, a tiny model, far more steps than it can take), sends it SIGNAL
# once it has started training, and checks that it exits with EXPECTED_STATUS (128 + signal),
# saved a checkpoint that `kiln sample` reads, printed how to resume, and left no temporary file.
# (TrainTest.InterruptedAndResumedEqualsUninterrupted checks that resuming continues exactly.)
set -u
KILN=$1 WORK=$2 SIG=$3 WANT=$4
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
"$KILN" train --steps 1000000 --batch 2 --block 8 --layers 1 --heads 2 --embd 8 \
  --eval-every 1000000 --out "$WORK/c.safetensors" >"$WORK/out" 2>"$WORK/err" &
pid=$!
# Wait until the run has said what it trains (signals are handled from then on), at most 60 s,
# and a little longer so that some steps are done.
i=0
while ! grep -q "unigram-entropy baseline" "$WORK/err" 2>/dev/null; do
  i=$((i + 1))
  if [ $i -gt 600 ]; then echo "training never started"; cat "$WORK/err"; kill -KILL $pid; exit 1; fi
  sleep 0.1
done
sleep 1
kill -"$SIG" $pid
wait $pid
status=$?
if [ "$status" -ne "$WANT" ]; then
  echo "exit status $status, expected $WANT"; cat "$WORK/err"; exit 1
fi
grep -q "interrupted by SIG$SIG after step" "$WORK/err" || { echo "no interruption message"; cat "$WORK/err"; exit 1; }
grep -q "resume with: kiln train --resume $WORK/c.safetensors" "$WORK/err" || { echo "no resume command"; cat "$WORK/err"; exit 1; }
"$KILN" sample --checkpoint "$WORK/c.safetensors" --tokens 5 >/dev/null || { echo "checkpoint unreadable"; exit 1; }
ls "$WORK" | grep -q "\.tmp\." && { echo "temporary file left behind"; ls "$WORK"; exit 1; }
exit 0
