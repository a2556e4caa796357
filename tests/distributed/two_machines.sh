#!/bin/sh
# two_machines.sh KILN WORKER
# Two "machines" — network namespaces joined by a veth pair, made here (needs root) — run the
# collectives scenario as a 2-node job of 2 ranks each: `kiln launch --nnodes 2` on each side,
# meeting through redis-server on the first, each rank talking over KILN_SOCKET_IFNAME.
# Exits 77 (CTest: skipped) where namespaces or redis-server are not available. Also checks
# that without KILN_SOCKET_IFNAME a multi-machine rendezvous fails at once, saying so.
set -u
KILN=$1 WORKER=$2
skip() { echo "skipped: $1"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces need it)"
command -v ip >/dev/null || skip "no ip command (iproute2)"
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || skip "no redis-server"
tag=k$$
A=${tag}a B=${tag}b
cleanup() {
  [ -n "${redis:-}" ] && kill "$redis" 2>/dev/null
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
}
trap cleanup EXIT
ip netns add "$A" 2>/dev/null || skip "cannot make a network namespace here"
ip netns add "$B" || exit 1
ip link add "v${tag}a" type veth peer name "v${tag}b" || skip "cannot make a veth pair here"
ip link set "v${tag}a" netns "$A" && ip link set "v${tag}b" netns "$B" || exit 1
ip -n "$A" addr add 10.77.0.1/24 dev "v${tag}a" && ip -n "$B" addr add 10.77.0.2/24 dev "v${tag}b" || exit 1
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set "v${tag}a" up && ip -n "$B" link set "v${tag}b" up || exit 1
ip netns exec "$A" redis-server --port 29577 --bind 10.77.0.1 --protected-mode no --save "" \
  --appendonly no >/dev/null 2>&1 &
redis=$!
i=0
until ip netns exec "$B" redis-cli -h 10.77.0.1 -p 29577 ping >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -gt 50 ] && { echo "redis-server did not start"; exit 1; }; sleep 0.1
done
# Without the interface name: a clear error, at once.
out=$(ip netns exec "$B" env RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29577 \
  timeout 20 "$WORKER" collectives 2>&1)
echo "$out" | grep -q "KILN_SOCKET_IFNAME is not set" || { echo "no KILN_SOCKET_IFNAME error: $out"; exit 1; }
common="--nnodes 2 --nproc-per-node 2 --master-addr 10.77.0.1 --master-port 29577 --run-id $tag"
ip netns exec "$A" env KILN_SOCKET_IFNAME="v${tag}a" timeout 120 "$KILN" launch $common --node-rank 0 \
  -- "$WORKER" collectives >"/tmp/$tag.a" 2>&1 &
first=$!
ip netns exec "$B" env KILN_SOCKET_IFNAME="v${tag}b" timeout 120 "$KILN" launch $common --node-rank 1 \
  -- "$WORKER" collectives >"/tmp/$tag.b" 2>&1
second=$?
wait $first
firstst=$?
cat "/tmp/$tag.a" "/tmp/$tag.b"
rm -f "/tmp/$tag.a" "/tmp/$tag.b"
[ $firstst -eq 0 ] && [ $second -eq 0 ] || { echo "node statuses $firstst and $second"; exit 1; }
exit 0
