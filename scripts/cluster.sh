#!/bin/sh
# A cluster on one machine with a real network between its hosts: K hosts
# as network namespaces, each with its own hostname (a UTS namespace),
# joined by veth pairs to a bridge of the cluster's own, with a tbf rate
# limit on each link direction where a bandwidth is asked. Open MPI starts
# ranks on it through this script as its rsh agent: TCP between hosts,
# shared memory inside one. Needs root (CI runs as root).
#
#   scripts/cluster.sh up NAME HOSTS [--bandwidth RATE] [--subnet A.B.C]
#   scripts/cluster.sh run NAME RANKS_PER_HOST -- COMMAND...   (mpirun on it)
#   scripts/cluster.sh exec NAME HOST COMMAND...   (a command on host 0..K-1)
#   scripts/cluster.sh down NAME
#   scripts/cluster.sh mpirun NAME MPIRUN-ARGS...   (mpirun with the cluster's
#       settings, the ranks and hosts yours: -np N --hostfile F, hosts
#       named NAME-hK; what dtrain launch runs as $DTRAIN_MPIRUN)
#   scripts/cluster.sh with NAME HOSTS [up options] -- COMMAND...
#       up, COMMAND (with $CLUSTER_RUN set to "scripts/cluster.sh run NAME"),
#       down: always, on failure and on Ctrl-C too
#   scripts/cluster.sh list
#
# NAME: 1 to 6 lowercase letters or digits. Host k is namespace dc-NAME-hk,
# hostname NAME-hk, address A.B.C.(k+1); mpirun runs in a namespace of its
# own, dc-NAME-l, at A.B.C.254: all of them on the bridge dcNAMEbr, which
# has no address, so the machine's own network never sees the cluster and
# nothing is routed or forwarded. In every namespace of the cluster TCP
# gives up on a peer after a few retransmissions (net.ipv4.tcp_retries2 =
# 4, some 6 s; the machine's own stays as it is), and mpirun's daemons
# send keepalives after 2 s idle: a host cut off ends the job in seconds.
# A connection idle through a step's compute keeps its window
# (tcp_slow_start_after_idle = 0, as training clusters set it): else each
# step's exchange restarts TCP's slow start. RATE as tc
# spells it (500mbit, 1gbit); the kernel here has tbf but not netem, so
# links are rate-limited but add no latency. An existing cluster of the
# same name is refused, not reused.
set -eu

SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
STATE=/run/dtrain-cluster

die() { echo "cluster.sh: $*" >&2; exit 2; }

check_name() {
  case $1 in
  '' | *[!a-z0-9]*) die "cluster name '$1': use 1 to 6 lowercase letters or digits" ;;
  esac
  [ ${#1} -le 6 ] || die "cluster name '$1': at most 6 characters (interface names are short)"
}

# A /24's first three numbers, A.B.C, each 0 to 255: the hosts are A.B.C.(k+1).
check_subnet() {
  case $1 in
  *[!0-9.]* | .* | *. | *..* | *.*.*.*) bad=1 ;;
  *.*.*) bad= ;;
  *) bad=1 ;;
  esac
  if [ -z "$bad" ]; then
    for b in $(echo "$1" | tr . ' '); do [ ${#b} -le 3 ] && [ "$b" -le 255 ] || bad=1; done
  fi
  [ -z "$bad" ] || die "up: --subnet '$1': expected A.B.C, three numbers from 0 to 255 (the hosts are A.B.C.1 ...)"
}

need_root() { [ "$(id -u)" = 0 ] || die "needs root (network namespaces, veth pairs, a bridge)"; }

# A subnet no other cluster here uses: 10.213.N.
free_subnet() {
  n=0
  while [ $n -lt 250 ]; do
    grep -qx "10.213.$n" "$STATE"/*/subnet 2>/dev/null || { echo "10.213.$n"; return; }
    n=$((n + 1))
  done
  die "no free subnet under 10.213.0.0/16"
}

# tbf on one direction of a link: DEV's egress (in namespace NS, or here).
limit() { # NS DEV RATE
  cmd="tc qdisc add dev $2 root tbf rate $3 burst 256kb latency 100ms"
  if [ -n "$1" ]; then ip netns exec "$1" $cmd; else $cmd; fi
}

up() {
  name=$1 hosts=$2
  shift 2
  rate= subnet=
  while [ $# -gt 0 ]; do
    case $1 in
    --bandwidth) rate=${2:?--bandwidth needs a rate, e.g. 500mbit}; shift 2 ;;
    --subnet) subnet=${2:?--subnet needs A.B.C}; shift 2 ;;
    *) die "up: unknown option $1 (expected --bandwidth RATE or --subnet A.B.C)" ;;
    esac
  done
  check_name "$name"
  [ -z "$subnet" ] || check_subnet "$subnet"
  case $hosts in '' | *[!0-9]*) die "up: HOSTS '$hosts' is not a number (1 to 64)" ;; esac
  [ "$hosts" -ge 1 ] && [ "$hosts" -le 64 ] || die "up: HOSTS $hosts (expected 1 to 64)"
  need_root
  [ ! -e "$STATE/$name" ] || die "cluster '$name' exists already (scripts/cluster.sh down $name)"
  ip link show "dc${name}br" >/dev/null 2>&1 && die "cluster '$name': bridge dc${name}br exists already"
  mkdir -p "$STATE"
  [ -n "$subnet" ] || subnet=$(free_subnet)
  mkdir "$STATE/$name"
  echo "$subnet" >"$STATE/$name/subnet"
  echo "$hosts" >"$STATE/$name/hosts"
  echo "$rate" >"$STATE/$name/bandwidth"
  trap 'down "$name" >/dev/null 2>&1; exit 1' INT TERM
  if ! build "$name" "$hosts" "$subnet" "$rate"; then
    down "$name" >/dev/null 2>&1 || true
    die "up: could not build cluster '$name' (left nothing behind)"
  fi
  trap - INT TERM
  echo "cluster $name: $hosts hosts on $subnet.0/24${rate:+, $rate each way per link}"
}

# One end of the cluster: namespace NS with address ADDR on the bridge
# through the veth pair OUTER (on the bridge) / INNER (in NS).
attach() { # NS OUTER INNER ADDR BRIDGE
  ip netns add "$1" || return 1
  ip netns exec "$1" ip link set lo up || return 1
  ip netns exec "$1" sysctl -qw net.ipv4.tcp_retries2=4 || return 1
  ip netns exec "$1" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0 || return 1
  ip link add "$2" type veth peer name "$3" || return 1
  ip link set "$3" netns "$1" || return 1
  ip link set "$2" master "$5" || return 1
  ip link set "$2" up || return 1
  ip netns exec "$1" ip addr add "$4/24" dev "$3" || return 1
  ip netns exec "$1" ip link set "$3" up
}

build() { # NAME HOSTS SUBNET RATE
  br="dc${1}br"
  ip link add "$br" type bridge || return 1
  ip link set "$br" up || return 1
  attach "dc-$1-l" "dc${1}l" "dc${1}il" "$3.254" "$br" || return 1
  k=0
  while [ $k -lt "$2" ]; do
    ns="dc-$1-h$k" outer="dc${1}h$k" inner="dc${1}i$k"
    attach "$ns" "$outer" "$inner" "$3.$((k + 1))" "$br" || return 1
    if [ -n "$4" ]; then
      limit "$ns" "$inner" "$4" || return 1 # host -> bridge
      limit "" "$outer" "$4" || return 1    # bridge -> host
    fi
    k=$((k + 1))
  done
}

down() {
  name=$1
  check_name "$name"
  need_root
  [ -e "$STATE/$name" ] || ip link show "dc${name}br" >/dev/null 2>&1 ||
    die "no cluster '$name' (scripts/cluster.sh list)"
  for ns in $(ip netns list | awk '{print $1}' | grep "^dc-$name-\(h[0-9]*\|l\)\$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  for l in $(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^dc${name}\(h[0-9]*\|l\|br\)\$" || true); do
    ip link del "$l" 2>/dev/null || true
  done
  rm -rf "${STATE:?}/$name"
}

# A command on one host: in its namespace, under its hostname. As the rsh
# agent (AGENT HOST WORDS...) the words are one shell command line, as a
# remote shell gets them.
exec_on() { # NAME HOST COMMAND...
  name=$1 host=$2 agent=${3:-}
  shift 3
  case $host in
  "$name"-h[0-9]*) k=${host#"$name"-h} ;;
  [0-9]*) k=$host host=$name-h$k ;;
  *) die "exec: host '$host' is not one of cluster $name's ($name-h0 ...)" ;;
  esac
  ip netns list | grep -q "^dc-$name-h$k\\b" || die "exec: cluster $name has no host $k"
  ns="dc-$name-h$k"
  if [ -n "$agent" ]; then
    exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
  fi
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

# mpirun in the launcher's namespace with the cluster's transport settings.
cluster_mpirun() { # NAME MPIRUN-ARGS...
  name=$1
  shift
  [ -e "$STATE/$name" ] || die "no cluster '$name' (scripts/cluster.sh up $name HOSTS)"
  subnet=$(cat "$STATE/$name/subnet")
  exec ip netns exec "dc-$name-l" mpirun --allow-run-as-root \
    --mca plm_rsh_agent "$SELF agent-$name" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self,vader --mca btl_tcp_if_include "$subnet.0/24" \
    --mca oob_tcp_if_include "$subnet.0/24" --mca btl_vader_single_copy_mechanism none \
    --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 \
    -x ASAN_OPTIONS=detect_leaks=0 "$@"
}

run() { # NAME RANKS_PER_HOST -- COMMAND...
  name=$1 per=$2
  shift 2
  [ "${1:-}" = -- ] && shift
  [ -e "$STATE/$name" ] || die "no cluster '$name' (scripts/cluster.sh up $name HOSTS)"
  case $per in '' | *[!0-9]*) die "run: RANKS_PER_HOST '$per' is not a number" ;; esac
  hosts=$(cat "$STATE/$name/hosts") subnet=$(cat "$STATE/$name/subnet")
  hf="$STATE/$name/hostfile"
  k=0
  : >"$hf"
  while [ $k -lt "$hosts" ]; do echo "$name-h$k slots=$per" >>"$hf"; k=$((k + 1)); done
  exec ip netns exec "dc-$name-l" mpirun --allow-run-as-root --hostfile "$hf" -np $((hosts * per)) \
    --mca plm_rsh_agent "$SELF agent-$name" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self,vader --mca btl_tcp_if_include "$subnet.0/24" \
    --mca oob_tcp_if_include "$subnet.0/24" --mca btl_vader_single_copy_mechanism none \
    --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 \
    -x ASAN_OPTIONS=detect_leaks=0 "$@"
}

with() { # NAME HOSTS [up options] -- COMMAND...
  name=$1 hosts=$2
  shift 2
  opts=
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts="$opts $1"; shift; done
  [ "${1:-}" = -- ] || die "with: expected -- COMMAND"
  shift
  up "$name" "$hosts" $opts >&2
  trap 'down "$name"' EXIT
  # The command runs in the background and the shell waits for it: a
  # signal to this script alone (kill, a supervisor's TERM) is taken at
  # once, where a command in the foreground would hold it until the
  # command ends. Such a command ignores SIGINT (sh's rule for background
  # jobs), so it is ended with SIGTERM; down ends what runs on the hosts.
  exec 3<&0
  CLUSTER_RUN="$SELF run $name" CLUSTER_NAME=$name "$@" <&3 3<&- &
  child=$!
  trap 'kill -s TERM $child 2>/dev/null; exit 130' INT
  trap 'kill -s TERM $child 2>/dev/null; exit 143' TERM
  rc=0
  wait $child || rc=$?
  exit $rc
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
up) [ $# -ge 2 ] || die "usage: up NAME HOSTS [--bandwidth RATE] [--subnet A.B.C]"; up "$@" ;;
down) [ $# -eq 1 ] || die "usage: down NAME"; down "$1" ;;
exec) [ $# -ge 3 ] || die "usage: exec NAME HOST COMMAND..."; n=$1 h=$2; shift 2; exec_on "$n" "$h" "" "$@" ;;
run) [ $# -ge 3 ] || die "usage: run NAME RANKS_PER_HOST -- COMMAND..."; run "$@" ;;
with) [ $# -ge 4 ] || die "usage: with NAME HOSTS [--bandwidth RATE] -- COMMAND..."; with "$@" ;;
list) ls "$STATE" 2>/dev/null || true ;;
mpirun) [ $# -ge 2 ] || die "usage: mpirun NAME MPIRUN-ARGS..."; check_name "$1"; cluster_mpirun "$@" ;;
agent-*) h=$1; shift; exec_on "${cmd#agent-}" "$h" agent "$@" ;;
-h | --help | help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" ;;
*) die "unknown command '$cmd' (up, run, exec, down, with, list; --help)" ;;
esac
