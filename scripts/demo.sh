#!/usr/bin/env bash
# scripts/demo.sh — `make demo`: a consumer group at work, in about a minute.
#
#  1. Finds a cluster: the one in ZOOKEEPER_PEERS/KAFKA_PEERS if set, else the
#     local one of `make cluster-up` if it runs, else starts it (and stops it
#     again at the end: the cluster is left running only if it ran before).
#  2. Creates a topic of 12 partitions and produces a steady stream to it
#     (examples/producer), with distinct values.
#  3. Runs three instances of the example group (examples/groupdemo), started
#     a few seconds apart, each printing live progress and its rebalances.
#     Each serves its Prometheus metrics (kprom) on a free port; the demo
#     shows a few lines of one scrape of c1.
#  4. Stops one instance midway (SIGTERM), so the rebalance shows; then stops
#     the producer, lets the others drain, and stops them.
#  5. Ends with a summary: produced, consumed, duplicates, missing, and the
#     committed offsets and lag that cmd/kafkaconsumer-groups reads from
#     ZooKeeper and Kafka.
#
# It exits 0 when every produced message was consumed and committed.
# Environment: PARTITIONS (12), RATE (messages/s, 300), WORK_PER_MESSAGE
# (simulated processing time, 5ms: one instance cannot keep up alone, so
# lag builds up and drains as instances join), KEEP=1 keeps the topic and
# the work directory (binaries, logs, records of the values).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
MAKE=${MAKE:-make}
PARTITIONS=${PARTITIONS:-12}
RATE=${RATE:-300}
WORK_PER_MESSAGE=${WORK_PER_MESSAGE:-5ms}

if [[ -t 1 ]]; then BOLD=$'\e[1m' DIM=$'\e[2m' OFF=$'\e[0m'; else BOLD='' DIM='' OFF=''; fi
began=$SECONDS
indent() { while IFS= read -r line; do printf '    %s\n' "$line"; done; } # unbuffered
say() { printf '\n%s[%3ds] ==> %s%s\n' "$BOLD" $((SECONDS - began)) "$*" "$OFF"; }
note() { printf '%s         %s%s\n' "$DIM" "$*" "$OFF"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kafkaconsumer-demo.XXXXXX")
BIN=$WORK/bin
started_cluster=0
topic=''
pids=()        # background processes of the demo, stopped on exit
tail_pid=''    # the process that shows their output
ok=0

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [[ -n $tail_pid ]]; then
		kill "$tail_pid" 2>/dev/null || true
		wait "$tail_pid" 2>/dev/null || true
	fi
	if [[ -n $topic && $started_cluster == 0 && ${KEEP:-0} != 1 ]]; then
		"$BIN/topics" delete "$topic" >/dev/null 2>&1 || true
	fi
	if [[ $started_cluster == 1 ]]; then
		say "Stopping the cluster this demo started: $MAKE cluster-down"
		"$MAKE" --no-print-directory -C "$ROOT" cluster-down 2>&1 | indent || true
	fi
	if [[ $ok == 1 && ${KEEP:-0} != 1 ]]; then
		rm -rf "$WORK"
	else
		echo "demo: binaries, logs and records are in $WORK" >&2
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'echo "demo: interrupted" >&2; exit 130' INT
trap 'echo "demo: terminated" >&2; exit 143' TERM

# ---------------------------------------------------------------- build
say "Building the group tool and the examples"
mkdir -p "$BIN"
go build -o "$BIN/" ./cmd/kafkaconsumer-groups ./examples/producer ./examples/topics ./scripts/jsonq
(cd examples/groupdemo && go build -o "$BIN/" .) # a module of its own (it uses kprom)
note "kafkaconsumer-groups, groupdemo, producer, topics, jsonq -> $BIN"

# ---------------------------------------------------------------- cluster
if [[ -n ${ZOOKEEPER_PEERS:-} && -n ${KAFKA_PEERS:-} ]]; then
	say "Using the cluster of ZOOKEEPER_PEERS=$ZOOKEEPER_PEERS KAFKA_PEERS=$KAFKA_PEERS (left running)"
elif [[ -f .cluster/env ]] && "$MAKE" --no-print-directory -C "$ROOT" cluster-status 2>/dev/null | grep -qx healthy; then
	say "The local cluster of make cluster-up is running already (left running)"
	# shellcheck source=/dev/null
	source .cluster/env
else
	say "Starting a local cluster: $MAKE cluster-up"
	note "one ZooKeeper and one Kafka broker as JVMs on free ports; state in .cluster/"
	note "the first run fetches the Kafka jars with Maven, which can take a few minutes"
	started_cluster=1
	# A heartbeat, so that a slow start does not look like a hang; it ends
	# its sleep when it is stopped.
	(
		trap 'kill "$nap" 2>/dev/null; exit 0' TERM
		start=$SECONDS
		while :; do
			sleep 15 &
			nap=$!
			wait "$nap"
			note "... still starting the cluster ($((SECONDS - start))s)"
		done
	) &
	heartbeat=$!
	pids+=("$heartbeat")
	status=0
	"$MAKE" --no-print-directory -C "$ROOT" cluster-up 2>&1 | indent || status=$?
	kill -TERM "$heartbeat" 2>/dev/null || true
	wait "$heartbeat" 2>/dev/null || true
	((status == 0)) || die "make cluster-up failed (see above)"
	[[ -f .cluster/env ]] || die "make cluster-up wrote no .cluster/env"
	# shellcheck source=/dev/null
	source .cluster/env
fi
export ZOOKEEPER_PEERS KAFKA_PEERS
"$BIN/kafkaconsumer-groups" --list --timeout 10s >/dev/null ||
	die "ZooKeeper at $ZOOKEEPER_PEERS does not answer"

# ---------------------------------------------------------------- helpers
groups() { "$BIN/kafkaconsumer-groups" --group "$group" "$@"; }

# The groups tool is read through its --json output (docs/observing.md
# lists the fields scripts may rely on), never through its tables, which
# are for people and change.

# instances prints the number of registered instances of the group (0
# when the group is not listed).
instances() {
	"$BIN/kafkaconsumer-groups" --list --json | "$BIN/jsonq" -default 0 "[group=$group].instances"
}

# field NAME [JSON]: prints a top-level field of the group's JSON
# description (read now, or given).
field() {
	local json=${2:-$(groups --json)}
	"$BIN/jsonq" "$1" <<<"$json"
}

# wait_until SECONDS DESCRIPTION COMMAND...: polls until COMMAND succeeds.
wait_until() {
	local limit=$1 what=$2 deadline=$((SECONDS + $1))
	shift 2
	until "$@"; do
		((SECONDS < deadline)) || die "gave up after ${limit}s waiting for $what"
		sleep 0.5
	done
}

has_instances() { [[ $(instances) == "$1" ]]; }
drained() { [[ $(field total_lag) == 0 ]]; }

declare -A pid # instance name -> its process

# start NAME: starts an instance of the example group in the background.
start() {
	"$BIN/groupdemo" -group "$group" -topic "$topic" -name "$1" -stats 3s -work "$WORK_PER_MESSAGE" \
		-record "$WORK/$1.values" -metrics 127.0.0.1:0 >"$WORK/$1.log" 2>&1 &
	pid[$1]=$!
	pids+=($!)
}

# stop PID...: SIGTERM, and wait for the processes to end.
stop() {
	kill -TERM "$@"
	for p in "$@"; do
		wait "$p" || die "process $p failed (logs in $WORK)"
	done
}

# scrape NAME: prints a few lines of one scrape of the metrics of instance
# NAME, at the address its log names; read with bash's /dev/tcp, so that
# no HTTP client needs to be installed.
scrape() {
	local addr body
	addr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$WORK/$1.log" | head -n 1)
	if [[ -z $addr ]]; then
		echo "no metrics address in the log of $1"
		return 0
	fi
	exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}"
	printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$addr" >&3
	body=$(cat <&3)
	exec 3<&-
	grep -E '^kafkaconsumer_(rebalances_total|partitions_assigned_total|claim_waits_total|commits_total|messages_acked_total|partition_lag_messages)[{ ]' <<<"$body" |
		sort -t'"' -k1,1 -k4,4n | awk '/messages_acked_total|lag_messages/ { if (n[$0 ~ /acked/]++ >= 3) next } { print }' || true
}

# ---------------------------------------------------------------- demo
topic=demo-$(date +%s)
group=$topic
say "Creating topic $topic with $PARTITIONS partitions"
"$BIN/topics" create "$topic" "$PARTITIONS" | indent

for log in producer c1 c2 c3; do : >"$WORK/$log.log"; done
tail -q -n +1 -F "$WORK"/{producer,c1,c2,c3}.log 2>/dev/null > >(indent) &
tail_pid=$!

say "Producing $RATE messages/s to $topic (examples/producer)"
"$BIN/producer" -topic "$topic" -rate "$RATE" -stats 5s -record "$WORK/produced.values" >"$WORK/producer.log" 2>&1 &
producer_pid=$!
pids+=("$producer_pid")

say "Starting instance c1 of group $group (examples/groupdemo, $WORK_PER_MESSAGE of work per message): it gets all $PARTITIONS partitions, and cannot keep up alone"
start c1
wait_until 30 "c1 to register" has_instances 1
sleep 8
say "Starting c2 and, a little later, c3: each join is a rebalance, and the lag drains"
start c2
wait_until 30 "c2 to register" has_instances 2
sleep 5
start c3
wait_until 30 "c3 to register" has_instances 3
sleep 10

say "What the group looks like (cmd/kafkaconsumer-groups --group $group)"
groups | indent

say "One scrape of c1's Prometheus metrics (examples/groupdemo -metrics, module kprom); three partitions of each per-partition series"
scrape c1 | indent

say "Stopping c2 with SIGTERM: it commits what it processed and leaves; c1 and c3 take over its partitions"
stop "${pid[c2]}"
sleep 12
say "The group after the rebalance"
groups | indent

say "Stopping the producer"
stop "$producer_pid"
say "Letting c1 and c3 drain the topic"
wait_until 60 "the group's lag to reach 0" drained
say "Stopping c1 and c3"
stop "${pid[c1]}" "${pid[c3]}"
wait_until 30 "c1 and c3 to leave" has_instances 0
sleep 1 # let the shown logs catch up
kill "$tail_pid" 2>/dev/null || true
wait "$tail_pid" 2>/dev/null || true
tail_pid=''

say "The group at the end"
groups | indent

# ---------------------------------------------------------------- summary
summary_field() { # summary_field FILE KEY: KEY=value of the SUMMARY line
	sed -n "s/^SUMMARY .*[ ]$2=\([^ ]*\).*/\1/p" "$1"
}
produced=$(summary_field "$WORK/producer.log" produced)
consumed=0
per_instance=()
for c in c1 c2 c3; do
	n=$(summary_field "$WORK/$c.log" consumed)
	consumed=$((consumed + ${n:-0}))
	per_instance+=("$c=${n:-?}")
done
cat "$WORK"/c?.values | sort -u >"$WORK/consumed.sorted"
sort -u "$WORK/produced.values" >"$WORK/produced.sorted"
distinct=$(wc -l <"$WORK/consumed.sorted")
duplicates=$((consumed - distinct))
missing=$(comm -23 "$WORK/produced.sorted" "$WORK/consumed.sorted" | wc -l)
unexpected=$(comm -13 "$WORK/produced.sorted" "$WORK/consumed.sorted" | wc -l)
json=$(groups --json)
committed=$(field total_committed "$json")
log_end=$(field total_log_end "$json")
lag=$(field total_lag "$json")

say "Summary"
note "produced:   $produced messages acknowledged by Kafka (distinct values)"
note "consumed:   $consumed (${per_instance[*]}), $distinct distinct"
note "duplicates: $duplicates (consumed twice: at-least-once delivery after a rebalance)"
note "missing:    $missing produced but never consumed; $unexpected consumed but not produced"
note "committed:  $committed = sum of the committed offsets of $PARTITIONS partitions; log end $log_end, lag $lag"
echo "DEMO SUMMARY topic=$topic produced=$produced consumed=$consumed distinct=$distinct duplicates=$duplicates missing=$missing committed=$committed log_end=$log_end lag=$lag elapsed=$((SECONDS - began))s"

if [[ $missing == 0 && $unexpected == 0 && $committed == "$produced" && $log_end == "$produced" && $lag == 0 ]]; then
	say "OK: every message was consumed and its offset committed"
	ok=1
else
	die "FAILED: the numbers above do not add up"
fi
