# Make targets for kafkaconsumer. The tests that need Kafka run against a
# local ZooKeeper-mode cluster of JVMs (internal/testcluster); it needs Java
# 17+ and, once, Maven to fetch the Kafka jars (`make jars`).
#
#   make lint          gofmt check, go vet and staticcheck over every module,
#                      and no executable binary tracked by git
#   make test          gofmt check, go vet, then all tests (-race) against a
#                      fresh cluster, torn down afterwards; with
#                      ZOOKEEPER_PEERS/KAFKA_PEERS set, against that cluster
#   make test-kraft    the integration suite (not the fault
#                      suite) with Config.Discovery DiscoverFromKafka against
#                      a fresh KRaft cluster (MODE=kraft), torn down afterwards;
#                      KAFKA_VERSION=4.4.0 for Kafka 4; and the tests of
#                      kafkaconsumer-groups on groups of Kafka's consumer
#                      group protocol (KIP-848), which skip before Kafka 4;
#                      the share group tests (KIP-932) skip before 4.2
#   make test-short    unit tests only (go test -race -short), no cluster
#   make bench         the benchmark program (bench/)
#   make demo          the example group (examples/)
#   make cluster-up    start a detached cluster (ZOOKEEPERS=1|3 BROKERS=1|3
#                      SECURITY=plaintext|sasl_ssl|mixed MODE=zookeeper|kraft
#                      ZOOKEEPER_SECURITY=plaintext|tls ZOOKEEPER_TICK_MS=N,
#                      ZooKeeper's tickTime, default 500; production
#                      ensembles run about 2000: minSessionTimeout is 2
#                      ticks, and a session expires up to a tick late);
#                      then `. .cluster/env` exports ZOOKEEPER_PEERS and
#                      KAFKA_PEERS (and, secured, KAFKA_SECURITY, KAFKA_TLS_CA,
#                      KAFKA_SASL_*; MODE=kraft: KAFKA_MODE=kraft).
#                      ZOOKEEPER_SECURITY=tls: ZooKeeper's only client port
#                      is TLS and needs a client certificate (Kafka 2.5+);
#                      ZOOKEEPER_PEERS are its addresses, and the env adds
#                      ZOOKEEPER_SECURITY, ZOOKEEPER_TLS_CA and two client
#                      certificates, ZOOKEEPER_TLS_CERT/_KEY and
#                      ZOOKEEPER_TLS_CERT2/_KEY2. MODE=kraft
#                      runs KRaft brokers (broker+controller) and a stand-alone
#                      ZooKeeper for the groups only; Kafka 4 runs only so:
#                      make cluster-up MODE=kraft KAFKA_VERSION=4.4.0
#                      (SECURITY=plaintext or mixed; mixed's EXTERNAL
#                      listener then takes SCRAM-SHA-512/256, PLAIN and
#                      OAUTHBEARER); Kafka 4.2+ runs share groups (KIP-932,
#                      share.version 1 by default at format; heartbeat 1 s,
#                      session 10 s; record lock and delivery limit at their
#                      defaults, set per group by the tests that need less)
#   make cluster-down  stop it and remove .cluster/
#   make soak          the chaos soak (SOAK_DURATION, SOAK_SEED; report in
#                      .soak/): see the target below. SOAK_COORDINATOR=kafka
#                      runs its consumers with CoordinatorKafka (no
#                      ZooKeeper), under the faults that apply to them
#                      (docs/soak.md); SOAK_COORDINATOR=migrate runs them
#                      with CoordinatorZooKeeper and switches the group to
#                      Kafka and back (kafkaconsumer-groups migrate, built
#                      into .soak/) alone and under every other fault, with
#                      instances of the other setting joining;
#                      SOAK_NONFOLLOWERS=1 adds a CoordinatorKafka instance
#                      while the switch says zookeeper, which the library
#                      does not keep apart (the run fails); SOAK_ORIGINAL=1
#                      an instance registering as the original does while
#                      it says kafka, whose claims must all be refused;
#                      SOAK_SWITCH_CUT_FROM_BROKERS=1 switches under the
#                      cuts of an instance from every broker too
#                      (docs/soak.md); SOAK_COORDINATOR=consumer runs
#                      them with CoordinatorKafka and GroupProtocolConsumer
#                      (KIP-848) on a KRaft cluster of Kafka 4.4.0 (the
#                      faults that need ZooKeeper left out), and
#                      SOAK_PROTOCOL_MOVE=1 adds rolling moves between the
#                      classic and the consumer protocol; default zookeeper
#   make test-matrix   the integration suite (not the fault suite) against
#                      each supported Kafka/ZooKeeper pair (PAIRS="2.8.2/3.5.10
#                      3.9.1/bundled ..."), then a table (scripts/test-matrix.sh)
#
# The versions: KAFKA_VERSION (default 3.9.1) and ZOOKEEPER_VERSION (default:
# the ZooKeeper server the Kafka release brings; a given version runs from
# ZooKeeper's own jars; with Kafka 4, which brings none, 3.8.4), for
# cluster-up, test and jars, e.g.
#   make test KAFKA_VERSION=2.8.2 ZOOKEEPER_VERSION=3.5.10

SHELL := /bin/bash
GO ?= go
TESTCLUSTER := $(GO) run ./internal/testcluster/cmd/testcluster
ZOOKEEPERS ?= 1
BROKERS ?= 1
SECURITY ?= plaintext
ZOOKEEPER_SECURITY ?= plaintext
MODE ?= zookeeper
# Empty: the testcluster command's default (500 ms).
ZOOKEEPER_TICK_MS ?=
STATICCHECK_VERSION ?= v0.8.2
TEST_FLAGS ?= -race -count=1 -timeout 25m -parallel 8
# Read by the testcluster command and by the tests (empty: the defaults).
KAFKA_VERSION ?=
ZOOKEEPER_VERSION ?=
export KAFKA_VERSION ZOOKEEPER_VERSION

.PHONY: all jars cluster-up cluster-down cluster-status test test-run test-kraft test-short \
	test-matrix fmt-check vet lint binaries-check bench demo soak

all: test

jars:
	$(TESTCLUSTER) jars

cluster-up:
	$(TESTCLUSTER) up -zookeepers $(ZOOKEEPERS) -brokers $(BROKERS) -security $(SECURITY) -mode $(MODE) \
		-zookeeper-security $(ZOOKEEPER_SECURITY) $(if $(strip $(ZOOKEEPER_TICK_MS)),-zookeeper-tick-ms $(ZOOKEEPER_TICK_MS))

cluster-down:
	$(TESTCLUSTER) down

cluster-status:
	$(TESTCLUSTER) status

# Without ZOOKEEPER_PEERS, start a cluster, run the tests against it and
# always stop it afterwards (on failure and on ^C too), keeping the tests'
# exit status.
test: fmt-check vet
ifeq ($(strip $(ZOOKEEPER_PEERS)),)
	@trap '$(MAKE) --no-print-directory cluster-down' EXIT; \
	$(MAKE) --no-print-directory cluster-up SECURITY=plaintext ZOOKEEPER_SECURITY=plaintext && \
	source .cluster/env && \
	$(MAKE) --no-print-directory test-run
else
	@$(MAKE) --no-print-directory test-run
endif

# The modules of the repository: the library, the Prometheus adapter kprom
# and the OpenTelemetry tracer kotel (modules of their own, so that the
# library depends on neither the Prometheus client nor OpenTelemetry), and
# examples/groupdemo, which uses kprom. Each target that runs over ./...
# runs in each of them.
MODULES := . kprom kotel examples/groupdemo
# each-module CMD: run CMD in every module, stopping at the first failure.
each-module = set -e; for m in $(MODULES); do (cd $$m && $(1)); done

test-run:
	@$(call each-module,echo "--- go test ($$m)" && $(GO) test $(TEST_FLAGS) ./...)

# The tests that run in both discovery modes; the fault suite, the tools
# and the tests of ZooKeeper broker discovery start ZooKeeper-mode clusters
# of their own or read /brokers, and stay with make test.
KRAFT_TESTS ?= TestIntegration|TestKafkaDiscovery|TestMigration
# The tool's tests of groups of Kafka's consumer group protocol (KIP-848):
# their description, and the migrate verb beside them; groups which only
# a Kafka 4 cluster keeps (they skip on older brokers, so make
# test runs them too, skipping): make test-kraft KAFKA_VERSION=4.4.0.
KRAFT_TOOL_TESTS ?= TestDescribeConsumerProtocol|TestMigrateConsumerProtocol
# The tests of package process on share groups (KIP-932), which skip
# before Kafka 4.2 (the root package's, TestIntegrationShareGroup*, are in
# KRAFT_TESTS).
KRAFT_PROCESS_TESTS ?= TestRunShare

test-kraft: fmt-check vet
	@trap '$(MAKE) --no-print-directory cluster-down' EXIT; \
	$(MAKE) --no-print-directory cluster-up SECURITY=plaintext ZOOKEEPER_SECURITY=plaintext MODE=kraft && \
	source .cluster/env && \
	$(GO) test $(TEST_FLAGS) -run '$(KRAFT_TESTS)' . && \
	$(GO) test $(TEST_FLAGS) -run '$(KRAFT_TOOL_TESTS)' ./cmd/kafkaconsumer-groups && \
	$(GO) test $(TEST_FLAGS) -run '$(KRAFT_PROCESS_TESTS)' ./process

# PAIRS, MATRIX_DIR, MATRIX_FLAGS: see scripts/test-matrix.sh.
test-matrix: fmt-check vet
	GO=$(GO) scripts/test-matrix.sh

test-short:
	@$(call each-module,$(GO) test -race -short ./...)

fmt-check:
	@files="$$(gofmt -l .)"; \
	if [ -n "$$files" ]; then echo "gofmt -l: not formatted:"; echo "$$files"; exit 1; fi

# The benchmark module is vetted too (not tested: make bench runs it), so
# that a change of the library that breaks its build shows here.
vet:
	@$(call each-module,$(GO) vet ./...)
	@cd bench && $(GO) vet ./...
	@cd soak && $(GO) vet ./...

# Build output is never committed (scripts/check-binaries.sh).
binaries-check:
	@scripts/check-binaries.sh

# gofmt, go vet and staticcheck over every module, and no tracked binary:
# the first step of CI.
lint: fmt-check vet binaries-check
	@$(call each-module,$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...)
	@cd bench && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@cd soak && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Hooks for the benchmark module (bench/Makefile) and the examples
# (examples/Makefile, target demo); they say so when there is nothing yet.
bench:
	@if [ -f bench/Makefile ]; then $(MAKE) -C bench; \
	else echo "make bench: no bench/Makefile yet"; fi

# The chaos soak (soak/, README "Guarantees and failure modes"): a cluster of
# 3 ZooKeeper nodes and 3 brokers of its own, consumer processes, a fault
# every few seconds for SOAK_DURATION, picked with SOAK_SEED (default: a new
# seed, printed); then the independent checker (internal/soakcheck). The
# report, timeline and events go to .soak/; it fails on any violation.
# SOAK_COORDINATOR=kafka: the consumers are coordinated by Kafka's group
# coordinator (Config.Coordinator CoordinatorKafka), and the faults on their
# ZooKeeper connections, which they do not have, are left out.
# SOAK_COORDINATOR=migrate: the consumers follow the group's coordinator
# switch, which the groups tool built here flips (docs/soak.md);
# SOAK_NONFOLLOWERS=1 and SOAK_ORIGINAL=1 add instances that do not follow
# it; SOAK_SWITCH_CUT_FROM_BROKERS=1 switches under the cuts from every broker.
# SOAK_PROCESS=1: the consumers run process.Run (ByKey, retries, dead
# letters, DurableAcks) and the checker judges key order and handlings after
# an ack too. The brokers' and ZooKeeper's logs are kept in .soak/logs/.
# SOAK_COORDINATOR=consumer: Kafka's consumer group protocol (KIP-848) on a
# KRaft cluster of 3 brokers of Kafka 4.4.0 (KAFKA_VERSION); SOAK_PROTOCOL_MOVE=1
# adds rolling moves between the classic and the consumer protocol.
SOAK_DURATION ?= 10m
SOAK_SEED ?=
SOAK_COORDINATOR ?= zookeeper
SOAK_NONFOLLOWERS ?= 0
SOAK_ORIGINAL ?= 0
SOAK_SWITCH_CUT_FROM_BROKERS ?= 0
SOAK_PROCESS ?= 0
SOAK_PROTOCOL_MOVE ?= 0
soak:
	$(GO) build -o .soak/kafkaconsumer-groups ./cmd/kafkaconsumer-groups
	cd soak && SOAK_DURATION=$(SOAK_DURATION) SOAK_SEED=$(SOAK_SEED) SOAK_COORDINATOR=$(SOAK_COORDINATOR) \
		SOAK_NONFOLLOWERS=$(SOAK_NONFOLLOWERS) SOAK_ORIGINAL=$(SOAK_ORIGINAL) \
		SOAK_PROCESS=$(SOAK_PROCESS) SOAK_PROTOCOL_MOVE=$(SOAK_PROTOCOL_MOVE) \
		SOAK_SWITCH_CUT_FROM_BROKERS=$(SOAK_SWITCH_CUT_FROM_BROKERS) SOAK_GROUPS_TOOL=../.soak/kafkaconsumer-groups $(GO) run . -out ../.soak

demo:
	@if [ -f examples/Makefile ]; then $(MAKE) -C examples demo; \
	else echo "make demo: no examples/Makefile yet"; fi
