# ConsentLedger: the two commands are `make demo` and `make test`.
# Each installs what is missing (libsodium-dev, libssl-dev, pkg-config, python3) from Debian's packages.

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := libsodium-dev libssl-dev pkg-config python3

.PHONY: deps test-deps build demo test bench service clean

deps:
	@if ! pkg-config --exists libsodium libcrypto 2>/dev/null || ! command -v python3 >/dev/null; then \
		echo "==> installing $(APT_PACKAGES) with apt-get"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	fi

build: deps
	swift build --product consentctl

## What only the tests need: a real browser for the HTML report, a FHIR R5 validator.
test-deps: deps
	@command -v chromium >/dev/null || { echo "==> installing chromium with apt-get"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@python3 -c "import fhir.resources, openapi_spec_validator, jsonschema, yaml" 2>/dev/null || { echo "==> installing fhir.resources, openapi-spec-validator, jsonschema, PyYAML from PyPI"; \
		python3 -m pip --version >/dev/null 2>&1 || $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null; \
		python3 -m pip install -q fhir.resources openapi-spec-validator jsonschema PyYAML || python3 -m pip install -q --break-system-packages fhir.resources openapi-spec-validator jsonschema PyYAML; }

## The seed scenario against a ledger in a temporary folder.
demo: build
	bash Samples/demo.sh "$$(swift build --show-bin-path)/consentctl"

## Every test: Swift Testing (unit, property, tamper, end-to-end), the independent Python
## verifiers of Spec/vectors, and the outside-tool checks (FHIR R5 validator, headless chromium).
test: test-deps
	swift build --build-tests
	swift test --skip-build
	python3 Spec/vectors/verify_vectors.py
	python3 Spec/vectors/verify_export.py
	python3 Tests/external/check_outputs.py "$$(swift build --show-bin-path)/consentctl"
	cd Samples/ConsentService && swift build --build-tests && swift test --skip-build
	python3 Tests/external/check_service.py "$$(cd Samples/ConsentService && swift build --show-bin-path)/consent-service"

## Release build; ledgers of 100k and 1M events over 10k subjects (takes a few minutes).
bench: deps
	swift build -c release
	"$$(swift build -c release --show-bin-path)/consent-bench" $(BENCH_ARGS)

## The HTTP service (Samples/ConsentService) on the file store ./consent-ledger, port 8080.
service: deps
	cd Samples/ConsentService && swift build -c release
	@echo "==> a token for alice: Samples/ConsentService/.build/release/consent-service token --subject alice"
	Samples/ConsentService/.build/release/consent-service serve --ledger consent-ledger --port 8080 --token-key consent-service.key

clean:
	rm -rf .build
