#!/bin/sh
# train_data_parallel.sh KILN WORK
# 1. `kiln launch --nproc-per-node 2 -- kiln train --batch 4` (compiled, data-parallel) ends
#    with the same losses as one process with --batch 8, and only rank 0 reports.
# 2. SIGTERM to one rank (not the launcher) mid-run: the ranks agree to stop after the same
#    step, rank 0 saves the checkpoint once, every rank exits 143 and so does the launcher.
set -u
KILN=$1 WORK=$2
# Starts a long 2-rank run writing to $WORK/$1.{out,err} and waits until it trains (at most
# 60 s) and a second more; sets $launcher.
start_long_run() {
  "$KILN" launch --nproc-per-node 2 -- "$KILN" train --steps 1000000 --batch 2 --block 8 --layers 1 \
    --heads 2 --embd 8 --eval-every 1000000 --out "$WORK/$1.safetensors" >"$WORK/$1.out" 2>"$WORK/$1.err" &
  launcher=$!
  i=0
  while ! grep -q "unigram-entropy baseline" "$WORK/$1.err" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 600 ]; then echo "training never started"; cat "$WORK/$1.err"; kill -KILL $launcher; exit 1; fi
    sleep 0.1
  done
  sleep 1
}
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
ARGS="--steps 20 --layers 1 --embd 32 --heads 2 --block 16 --eval-every 20 --eval-batches 2 --warmup 5 --save-every off"
"$KILN" train $ARGS --batch 8 --out "$WORK/one.safetensors" >"$WORK/one.out" 2>"$WORK/one.err" ||
  { echo "one process failed"; cat "$WORK/one.err"; exit 1; }
"$KILN" launch --nproc-per-node 2 -- "$KILN" train $ARGS --batch 4 --out "$WORK/two.safetensors" \
  >"$WORK/two.out" 2>"$WORK/two.err" || { echo "two ranks failed"; cat "$WORK/two.err"; exit 1; }
one=$(grep "^final:" "$WORK/one.out")
two=$(grep "^\[rank 0\] final:" "$WORK/two.out" | sed 's/^\[rank 0\] //')
[ -n "$one" ] && [ "$one" = "$two" ] || { echo "losses differ: '$one' vs '$two'"; cat "$WORK/two.err"; exit 1; }
grep -q "per rank, 2 ranks (data-parallel)" "$WORK/two.err" || { echo "no data-parallel line"; cat "$WORK/two.err"; exit 1; }
grep -q "^\[rank 1\]" "$WORK/two.out" "$WORK/two.err" && { echo "rank 1 printed"; cat "$WORK/two.out" "$WORK/two.err"; exit 1; }

start_long_run sig
rank1=$(pgrep -P $launcher | sed -n 2p)
[ -n "$rank1" ] || { echo "no second rank"; kill -KILL $launcher; exit 1; }
kill -TERM "$rank1"
wait $launcher
status=$?
[ "$status" -eq 143 ] || { echo "launcher exit status $status, expected 143"; cat "$WORK/sig.err"; exit 1; }
[ "$(grep -c "checkpoint saved to" "$WORK/sig.err")" -eq 1 ] || { echo "not one save"; cat "$WORK/sig.err"; exit 1; }
grep -q "^\[rank 0\] kiln train: interrupted by SIGTERM after step" "$WORK/sig.err" || { echo "no interruption message"; cat "$WORK/sig.err"; exit 1; }
"$KILN" sample --checkpoint "$WORK/sig.safetensors" --tokens 5 >/dev/null 2>&1 || { echo "checkpoint unreadable"; exit 1; }

# 3. SIGINT to the launcher (a terminal's Ctrl-C): forwarded to both ranks, status 130.
start_long_run int
kill -INT $launcher
wait $launcher
status=$?
[ "$status" -eq 130 ] || { echo "launcher exit status $status after SIGINT, expected 130"; cat "$WORK/int.err"; exit 1; }
grep -q "^\[rank 0\] kiln train: interrupted by SIGINT after step" "$WORK/int.err" || { echo "no SIGINT message"; cat "$WORK/int.err"; exit 1; }
[ -f "$WORK/int.safetensors" ] || { echo "no checkpoint after SIGINT"; exit 1; }
exit 0
