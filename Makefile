# stkrelay: `make run` starts a 3-agent demo site; `make test` runs the suite.
# Both bootstrap everything they need first (scripts/bootstrap.sh).
PY := .venv/bin/python
PYTEST := .venv/bin/pytest
# Two pytest workers (pytest-xdist), each taking whole test files: the agent tests
# mostly wait on leases and timeouts, so two at once halve the wall time on 2 cores.
TEST_WORKERS ?= 2

.PHONY: bootstrap run test long verify verify-ci image image-test chaos fuzz bench bench-gate bench-ownership bench-failover bench-relay bench-relay-idle bench-switchover bench-panel bench-login bench-hostile bench-compaction bench-footprint screenshots messages lint format clean bench-cloud bench-cloud-scale bench-fleet bench-etcd

bootstrap:
	@scripts/bootstrap.sh

run: bootstrap
	@$(PY) scripts/demo.py

test: bootstrap
	@$(PYTEST) -m "not chaos and not image and not long" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The tests of 15 s or more (marker `long`), out of `make test` to keep it
# near its 10-minute budget on 2 cores; `.ci/run` runs them right after it.
long: bootstrap
	@$(PYTEST) -m long -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The agent's container image, built with podman from a wheelhouse (scripts/image.sh), and
# a site run from it (tests/test_image.py: 3 agents, a volume share and smb://, kill -9,
# podman stop). `.ci/run` runs both after `make test`.
image: bootstrap
	@scripts/image.sh

image-test: bootstrap
	@$(PYTEST) -m image $(PYTEST_ARGS) tests/test_image.py

# Chaos judged by client history (tests/test_chaos.py): STK_CHAOS_FAULTS (200),
# STK_CHAOS_SEED, STK_CHAOS_BACKEND (file); the table, history and seed go to .chaos/.
chaos: bootstrap
	@$(PYTEST) -m chaos -s $(PYTEST_ARGS)

# The fuzzers of the guarded reader and the wire protocol, with many more examples;
# the serving right's model (tests/servesim.py) on STK_SERVE_SEEDS random pools.
fuzz: bootstrap
	@STK_FUZZ_EXAMPLES=$${STK_FUZZ_EXAMPLES:-20000} $(PYTEST) tests/test_untrusted.py tests/test_unencodable.py tests/test_protocol_fuzz.py tests/test_proxy_header.py $(PYTEST_ARGS)
	@STK_SERVE_SEEDS=$${STK_SERVE_SEEDS:-2000} $(PYTEST) tests/test_serving_model.py -k random_pools $(PYTEST_ARGS)

# The pool's model checked by SPIN (verify/pool.pml; docs/serving-right.md "The model, checked by SPIN"):
# the rules at the stated bound, then every rule switched off (each must print a trail).
# SPIN's own output for every search; niced, memory bounded (MEMLIM, MB).
verify: bootstrap
	@verify/check.sh full
	@verify/check.sh mutants
	@verify/check.sh witness
	@verify/check.sh witness-mutants

# The smaller bound .ci/run checks (a few minutes).
verify-ci: bootstrap
	@verify/check.sh ci

bench: bench-failover bench-relay bench-relay-idle bench-switchover bench-panel bench-login bench-hostile bench-compaction bench-footprint bench-cloud bench-fleet bench-etcd bench-gate bench-ownership

bench-failover: bootstrap
	@$(PY) bench/failover.py $(BENCH_ARGS)
	@$(PY) bench/failover_beacons.py
	@$(PY) bench/failover_beacons.py --members 2 --profiles "" --kills 0 --replays 0 --direct-cuts 10
	@$(PY) bench/stations.py
	@$(PY) bench/share_load.py --members 2,3,10

bench-relay: bootstrap
	@$(PY) bench/relay.py $(BENCH_ARGS)
	@$(PY) bench/proxy.py $(BENCH_ARGS)
	@$(PY) bench/door.py $(BENCH_ARGS)
	@$(PY) bench/websocket.py

bench-relay-idle: bootstrap
	@$(PY) bench/relay_idle.py $(BENCH_ARGS)

bench-switchover: bootstrap
	@$(PY) bench/switchover.py $(BENCH_ARGS)

bench-panel: bootstrap
	@$(PY) bench/panel.py $(BENCH_ARGS)

bench-fleet: bootstrap
	@$(PY) bench/fleet.py $(BENCH_ARGS)
	@$(PY) bench/fleet_agent.py

bench-hostile: bootstrap
	@$(PY) bench/hostile_share.py $(BENCH_ARGS)

# A pool's event files after 1,000,000 events: share bytes, and a new agent joining.
bench-compaction: bootstrap
	@$(PY) bench/compaction.py $(BENCH_ARGS)

# Memory and idle CPU of every process of an agent of a 3-member site.
bench-footprint: bootstrap
	@$(PY) bench/footprint.py $(BENCH_ARGS)
# The cloud relay (docs/design.md §14): latency through it vs direct, remote recovery after kill -9 and drain.
bench-cloud: bootstrap
	@$(PY) bench/cloud.py $(BENCH_ARGS)
# issue 26: one cloud node under 200 simulated sites' tunnels and 2,000 remote clients (not in `make bench`).
bench-cloud-scale: bootstrap
	@$(PY) bench/cloud_scale.py $(BENCH_ARGS)
# etcd: failover and switchover vs the file share in one run; 100 pools on one 3-member etcd.
bench-etcd: bootstrap
	@$(PY) bench/etcd.py $(BENCH_ARGS)

# the VRRP gate with the real keepalived in namespaces: FAULT and SIGKILL -> new lease (needs root).
bench-gate: bootstrap
	@$(PY) bench/gate.py $(BENCH_ARGS)

bench-ownership: bootstrap
	@$(PY) bench/ownership.py $(BENCH_ARGS)

bench-login: bootstrap
	@$(PY) bench/login_flood.py $(BENCH_ARGS)

screenshots: bootstrap
	@$(PY) scripts/screenshots.py

# The panel's catalogues (locale/, zh-Hant and English): collect every string, compile the .mo files.
messages: bootstrap
	@scripts/messages.sh

# The type checker too: strict on the election's core, ports and runtime and the relay's wire,
# the default level elsewhere (pyproject.toml [tool.mypy]).
lint: bootstrap
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check .
	@.venv/bin/mypy

format: bootstrap
	@.venv/bin/ruff format .
	@.venv/bin/ruff check --fix .

clean:
	rm -rf .venv .demo
