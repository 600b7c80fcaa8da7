#!/usr/bin/env bash
# scripts/test-matrix.sh — `make test-matrix`: the integration suite against
# each supported Kafka/ZooKeeper pair, then a summary table.
#
# For each pair KAFKA/ZOOKEEPER of $PAIRS (default: the README's table) it
# runs the root package's tests with KAFKA_VERSION and ZOOKEEPER_VERSION set
# and no ZOOKEEPER_PEERS/KAFKA_PEERS, so that TestMain starts a fresh
# cluster of that pair (its own free ports and temporary directory; the
# jars are fetched with Maven once per version) and the tests set sarama's
# Config.Version to the broker's. ZOOKEEPER "bundled" runs the ZooKeeper
# server that the Kafka release brings.
#
# The integration suite is every test of the root package but:
#   - the fault suite (TestFault*, TestAckAnyOrderCrashRestart; needFaults
#     honours KAFKACONSUMER_SKIP_FAULTS, set here too), which kills and
#     restarts nodes for minutes and runs on the default pair in make test;
#   - the tests that start their own default-version clusters
#     (TestIntegrationSecured*, TestIntegrationZooKeeperSASL*,
#     TestFaultCloseIsBounded): they do not depend on the pair.
# The unit tests of the package run too (a second or two).
#
# SARAMA_VERSION, when set, is the sarama Config.Version the tests use
# instead of each broker's ("default": sarama's default, 2.8.0), to learn
# what a user must set.
#
# Logs: $MATRIX_DIR (default .matrix)/<kafka>-<zookeeper>.log; the table is
# also written to $MATRIX_DIR/summary.md. Exit status 1 when a pair failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}
PAIRS=${PAIRS:-"1.1.1/bundled 2.0.1/bundled 2.2.2/bundled 2.4.1/bundled 2.6.3/bundled 2.8.2/bundled 2.8.2/3.5.10 2.8.2/3.6.4 3.4.1/bundled 3.4.1/3.6.4 3.4.1/3.8.4 3.9.1/bundled 3.9.1/3.8.4 3.9.1/3.9.4"}
MATRIX_DIR=${MATRIX_DIR:-.matrix}
MATRIX_SKIP=${MATRIX_SKIP:-'^(TestFault|TestAckAnyOrderCrashRestart|TestIntegrationSecured|TestIntegrationZooKeeperSASL)'}
MATRIX_FLAGS=${MATRIX_FLAGS:-"-race -count=1 -timeout 20m -parallel 8"}
mkdir -p "$MATRIX_DIR"

rows=()
status=0
for pair in $PAIRS; do
	kafka=${pair%%/*}
	zookeeper=${pair#*/}
	[ "$zookeeper" = "$pair" ] && zookeeper=bundled
	zkenv=$zookeeper
	[ "$zookeeper" = bundled ] && zkenv=
	log="$MATRIX_DIR/$kafka-$zookeeper.log"
	echo "--- Kafka $kafka, ZooKeeper $zookeeper (log: $log)"
	began=$(date +%s)
	# shellcheck disable=SC2086 # MATRIX_FLAGS is a list of flags
	env -u ZOOKEEPER_PEERS -u KAFKA_PEERS KAFKA_VERSION="$kafka" ZOOKEEPER_VERSION="$zkenv" \
		KAFKACONSUMER_SKIP_FAULTS=1 KAFKACONSUMER_TEST_SARAMA_VERSION="${SARAMA_VERSION:-}" \
		"$GO" test $MATRIX_FLAGS -v -skip "$MATRIX_SKIP" . >"$log" 2>&1
	rc=$?
	secs=$(($(date +%s) - began))
	passed=$(grep -c '^--- PASS' "$log")
	failed=$(grep -c '^--- FAIL' "$log")
	# The cluster line TestMain prints: the ZooKeeper and Java it ran.
	cluster=$(grep -m1 '^test cluster:' "$log" | sed 's/^test cluster: //')
	result=ok
	if [ "$rc" -ne 0 ]; then
		result=FAIL
		status=1
		[ "$failed" -eq 0 ] && failed="(exit $rc)"
		grep -E '^ *--- FAIL|^(FAIL|panic)' "$log" | head -n 20 # subtests too
		if [ -z "$cluster" ]; then tail -n 20 "$log"; fi
	fi
	printf '    %s: %s passed, %s failed, %dm%02ds\n' "$result" "$passed" "$failed" $((secs / 60)) $((secs % 60))
	rows+=("| $kafka | $zookeeper | ${cluster:-?} | $passed | $failed | $((secs / 60))m$(printf %02d $((secs % 60)))s | $result |")
done

summary="$MATRIX_DIR/summary.md"
{
	echo "Integration suite, $(date -u +%Y-%m-%d), $("$GO" env GOVERSION), $(uname -sm), sarama Version: ${SARAMA_VERSION:-that of each broker}"
	echo
	echo "| Kafka | ZooKeeper | cluster (as run) | passed | failed | time | result |"
	echo "|---|---|---|---|---|---|---|"
	printf '%s\n' "${rows[@]}"
} >"$summary"
echo
cat "$summary"
exit $status
