# ConsentLedger: the two commands are `make demo` and `make test`.
# Each installs what is missing (libsodium-dev, libssl-dev, libsqlite3-dev, pkg-config, python3) from Debian's packages.

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := libsodium-dev libssl-dev libsqlite3-dev pkg-config python3

# The PostgreSQL store is behind the root package's PostgreSQL trait, in its own build folder,
# so the default build (the core and consentctl) never compiles NIO.
PG_BUILD := --traits PostgreSQL --scratch-path .build-pg
## Release builds link the Swift runtime statically: a consentctl process starts in about 8 ms
## instead of 10-12 (measured in README, Benchmarks), which is most of a one-subject read.
RELEASE := -c release --static-swift-stdlib

.PHONY: deps test-deps build build-postgres demo test test-with-postgres bench bench-postgres torture fuzz fuzz-bounded service load-test docs cli-docs install clean

deps:
	@if ! pkg-config --exists libsodium libcrypto sqlite3 2>/dev/null || ! command -v python3 >/dev/null; then \
		echo "==> installing $(APT_PACKAGES) with apt-get"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	fi

build: deps
	swift build --product consentctl

## consentctl with --store postgres:// (compiles swift-nio and postgres-nio: minutes the first time).
build-postgres: deps
	swift build $(PG_BUILD) --product consentctl
	@echo "==> $$(swift build $(PG_BUILD) --show-bin-path)/consentctl"

## What only the tests need: a real browser for the HTML report; FHIR R5 models and FHIRPath for
## the FHIR export; JSON Schema for every command's JSON; an OpenAPI validator for the service.
PYPI_PACKAGES := fhir.resources fhirpathpy openapi-spec-validator "jsonschema>=4.18" referencing PyYAML PyNaCl schemathesis
test-deps: deps
	@command -v chromium >/dev/null || { echo "==> installing chromium with apt-get"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@python3 -c "import fhir.resources, fhirpathpy, openapi_spec_validator, jsonschema, referencing, yaml, nacl, schemathesis" 2>/dev/null || { echo '==> installing $(PYPI_PACKAGES) from PyPI'; \
		python3 -m pip --version >/dev/null 2>&1 || $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null; \
		python3 -m pip install -q $(PYPI_PACKAGES) || python3 -m pip install -q --break-system-packages $(PYPI_PACKAGES); }

## The seed scenario against a ledger in a temporary folder.
demo: build
	@echo "==> building the witness server (Samples/ConsentService: Hummingbird; the first build takes a few minutes)"
	cd Samples/ConsentService && swift build --product consent-witness
	bash Samples/demo.sh "$$(swift build --show-bin-path)/consentctl" "$$(cd Samples/ConsentService && swift build --show-bin-path)/consent-witness"

## Every test: Swift Testing (unit, property, tamper, end-to-end, PostgreSQL), the independent
## Python verifiers of Spec/vectors, the scaling simulation's self-test, and the outside-tool
## checks (every command's JSON against Spec/schemas, FHIR R5 over random histories, headless
## chromium, the service against Spec/openapi.yaml on both stores, the docs against the code). PostgreSQL tests run against a throwaway server that scripts/with-test-postgres.sh
## installs (Debian's postgresql), starts on a loopback port and removes afterwards.
test: test-deps
	@echo "==> the core and consentctl without NIO (default traits)"
	swift build
	@test ! -e .build/debug/NIOPosix.build || { echo "NIO was compiled into the default build" >&2; exit 1; }
	@echo "==> docs: cli.md and embedding.md against --help and the compiled sample; links; wording"
	python3 scripts/generate_docs.py "$$(swift build --show-bin-path)/consentctl" --check
	python3 Tests/external/check_docs.py
	@echo "==> everything with the PostgreSQL trait"
	swift build $(PG_BUILD) --build-tests
	cd Samples/ConsentService && swift build --build-tests
	bash scripts/with-test-postgres.sh $(MAKE) --no-print-directory test-with-postgres
	@echo "==> make install into a scratch PREFIX: the binary and its man page"
	@prefix=$$(mktemp -d) && $(MAKE) --no-print-directory install PREFIX="$$prefix" >/dev/null \
		&& "$$prefix/bin/consentctl" --version >/dev/null && grep -q '^\.Dt CONSENTCTL 1' "$$prefix/share/man/man1/consentctl.1" \
		&& echo "installed and ran $$prefix/bin/consentctl; man page $$prefix/share/man/man1/consentctl.1" && rm -rf "$$prefix"
	@echo "==> the library's DocC documentation (warnings are errors)"
	$(MAKE) --no-print-directory docs
	@echo "==> fuzzing, bounded: $(FUZZ_TEST_RUNS) inputs per target (make fuzz runs longer)"
	$(MAKE) --no-print-directory fuzz-bounded

## Fuzzing: the readers of untrusted bytes (event lines, catalogues, bundles, state proofs,
## notes, `apply` files, derived files) under libFuzzer with AddressSanitizer, in a build folder
## of its own. `make fuzz` runs each target for FUZZ_SECONDS; `make test` runs FUZZ_TEST_RUNS
## inputs of each (scripts/fuzz.sh). Crashes land in .fuzz/crashes/.
## (SwiftPM's --sanitize=fuzzer links libFuzzer but leaves the modules without coverage
## instrumentation, so the compiler is asked for it too.)
FUZZ_BUILD := --sanitize=fuzzer --sanitize=address -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING --product consent-fuzz --scratch-path .build-fuzz
FUZZ_SECONDS ?= 300
FUZZ_TEST_RUNS ?= 3000
fuzz: deps
	swift build $(FUZZ_BUILD)
	bash scripts/fuzz.sh "$$(swift build $(FUZZ_BUILD) --show-bin-path)/consent-fuzz" -max_total_time=$(FUZZ_SECONDS)

fuzz-bounded: deps
	swift build $(FUZZ_BUILD)
	bash scripts/fuzz.sh "$$(swift build $(FUZZ_BUILD) --show-bin-path)/consent-fuzz" --runs $(FUZZ_TEST_RUNS)

## Run by `make test` inside scripts/with-test-postgres.sh (it needs CONSENTLEDGER_TEST_POSTGRES_URL).
test-with-postgres:
	swift test $(PG_BUILD) --skip-build --skip ServerFaultTests
	@echo "==> server faults (crash, restart, pause): alone, since they stop the server every other test uses"
	swift test $(PG_BUILD) --skip-build --filter ServerFaultTests
	python3 Spec/vectors/verify_vectors.py
	python3 Spec/vectors/verify_export.py
	python3 Spec/vectors/verify_state.py
	python3 Spec/vectors/verify_key_file.py
	python3 Spec/vectors/verify_witness.py
	python3 Spec/scaling_sim.py --self-test
	"$$(swift build $(PG_BUILD) --show-bin-path)/consent-bench" --sizes 2000 --durable 20 --batch 200 --dir /tmp/consent-bench-smoke
	"$$(swift build $(PG_BUILD) --show-bin-path)/consent-torture" --kills 10 --dir /tmp/consent-torture-smoke --service "$$(cd Samples/ConsentService && swift build --show-bin-path)/consent-service"
	python3 Tests/external/check_outputs.py "$$(swift build $(PG_BUILD) --show-bin-path)/consentctl"
	python3 Tests/external/check_clock.py "$$(swift build $(PG_BUILD) --show-bin-path)/consentctl"
	python3 Tests/external/check_schemas.py "$$(swift build $(PG_BUILD) --show-bin-path)/consentctl"
	python3 Tests/external/check_fhir.py "$$(swift build $(PG_BUILD) --show-bin-path)/consentctl" --histories 1000 --edge-cases
	cd Samples/ConsentService && swift test --skip-build
	python3 Tests/external/check_witness.py "$$(swift build $(PG_BUILD) --show-bin-path)/consentctl" "$$(cd Samples/ConsentService && swift build --show-bin-path)/consent-witness"
	python3 Tests/external/check_service.py "$$(cd Samples/ConsentService && swift build --show-bin-path)/consent-service"
	python3 Tests/external/check_service.py "$$(cd Samples/ConsentService && swift build --show-bin-path)/consent-service" "$$CONSENTLEDGER_TEST_POSTGRES_URL?schema=service_check"
	python3 Tests/external/run_schemathesis.py "$$(cd Samples/ConsentService && swift build --show-bin-path)/consent-service"
	python3 Tests/external/run_schemathesis.py "$$(cd Samples/ConsentService && swift build --show-bin-path)/consent-service" "$$CONSENTLEDGER_TEST_POSTGRES_URL?schema=schemathesis_check"

## Release build; ledgers of 100k and 1M events over 10k subjects (takes a few minutes).
## The bench at 10k, 100k, 1M and 5M events (about 20 minutes here); it writes BENCHMARKS.svg,
## the plot of time per operation against ledger size that BENCHMARKS.md shows.
BENCH_ARGS ?= --sizes 10000,100000,1000000,5000000 --plot BENCHMARKS.svg
bench: deps
	swift build $(RELEASE)
	"$$(swift build $(RELEASE) --show-bin-path)/consent-bench" $(BENCH_ARGS)

## Durable commands on a PostgreSQL ledger against pgbench's one-row transactions on the same
## throwaway server: one writer (existing and new subjects, with statements per command), 16
## threads of one process (group commit), 4 writer processes, then verify (release build from
## the service package, which has the trait).
PG_BENCH_ARGS ?= --commands 2000 --writers 4
bench-postgres: deps
	cd Samples/ConsentService && swift build -c release --product consent-bench
	bash scripts/with-test-postgres.sh sh -c '"$$(cd Samples/ConsentService && swift build -c release --show-bin-path)/consent-bench" --postgres "$$CONSENTLEDGER_TEST_POSTGRES_URL" $(PG_BENCH_ARGS)'

## The HTTP service (Samples/ConsentService) on the file store ./consent-ledger, port 8080.
## STORE=postgres://USER@HOST:PORT/DB?schema=NAME puts the ledger in PostgreSQL instead.
STORE ?= consent-ledger
service: deps
	cd Samples/ConsentService && swift build -c release --product consent-service
	@echo "==> a token for alice: Samples/ConsentService/.build/release/consent-service token --subject alice"
	Samples/ConsentService/.build/release/consent-service serve --store "$(STORE)" --port 8080 --token-key consent-service.key $(SERVICE_FLAGS)

## wrk against the service on both stores (a throwaway PostgreSQL), then verify; DURATION=10 THREADS=8.
## Crash torture: writers killed with SIGKILL at random moments, 200 times per writer kind
## (group-committed threads, batched library calls, consentctl apply, consentctl give and revoke
## one process each, key rotations, catalogue publications, erasures, the HTTP service under 16
## clients); after every kill the
## ledger opens, verify passes, every acknowledged command is present and every command is
## whole. `make test` runs 10 per kind.
TORTURE_ARGS ?= --kills 200
torture: deps
	swift build $(RELEASE) --product consent-torture
	swift build $(RELEASE) --product consentctl
	cd Samples/ConsentService && swift build -c release --product consent-service
	"$$(swift build $(RELEASE) --show-bin-path)/consent-torture" $(TORTURE_ARGS) --service "$$(cd Samples/ConsentService && swift build -c release --show-bin-path)/consent-service"

load-test: deps
	bash scripts/with-test-postgres.sh bash scripts/load-test.sh

## The library's DocC documentation (static HTML in .build/docs; warnings are errors).
docs: build
	swift package --allow-writing-to-directory .build/docs generate-documentation \
		--target ConsentLedger --target ConsentDomain --target LedgerFormat --target LedgerStorage \
		--target TransparencyLog --target ConsentReports --enable-experimental-combined-documentation \
		--transform-for-static-hosting --output-path .build/docs --warnings-as-errors
	@echo "==> open .build/docs/documentation/consentledger/index.html through a web server (python3 -m http.server -d .build/docs)"

## docs/cli.md from consentctl --help, and docs/embedding.md's code from Samples/Embedding/main.swift.
cli-docs: build
	python3 scripts/generate_docs.py "$$(swift build --show-bin-path)/consentctl"

## consentctl (release) and its man page (swift-argument-parser's generate-manual plugin) under
## PREFIX: $(PREFIX)/bin/consentctl and $(PREFIX)/share/man/man1/consentctl.1.
PREFIX ?= /usr/local
install: deps
	swift build $(RELEASE) --product consentctl
	swift package plugin generate-manual
	install -d "$(DESTDIR)$(PREFIX)/bin" "$(DESTDIR)$(PREFIX)/share/man/man1"
	install -m 0755 "$$(swift build $(RELEASE) --show-bin-path)/consentctl" "$(DESTDIR)$(PREFIX)/bin/consentctl"
	install -m 0644 .build/plugins/GenerateManual/outputs/consentctl/consentctl.1 "$(DESTDIR)$(PREFIX)/share/man/man1/consentctl.1"
	@echo "==> installed $(DESTDIR)$(PREFIX)/bin/consentctl and its man page (man consentctl)"

clean:
	rm -rf .build .build-pg .build-fuzz .fuzz Samples/ConsentService/.build
