# ConsentLedger: the two commands are `make demo` and `make test`.
# Each installs what is missing (libsodium-dev, libssl-dev, pkg-config, python3) from Debian's packages.

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := libsodium-dev libssl-dev pkg-config python3

.PHONY: deps build demo test bench clean

deps:
	@if ! pkg-config --exists libsodium libcrypto 2>/dev/null || ! command -v python3 >/dev/null; then \
		echo "==> installing $(APT_PACKAGES) with apt-get"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	fi

build: deps
	swift build --product consentctl

## The seed scenario against a ledger in a temporary folder.
demo: build
	bash Samples/demo.sh "$$(swift build --show-bin-path)/consentctl"

## Every test: Swift Testing (unit, property, tamper, end-to-end) and the independent Python verifier.
test: deps
	swift build --build-tests
	swift test --skip-build
	python3 Spec/vectors/verify_vectors.py

## Release build; ledgers of 100k and 1M events over 10k subjects (takes a few minutes).
bench: deps
	swift build -c release
	"$$(swift build -c release --show-bin-path)/consent-bench" $(BENCH_ARGS)

clean:
	rm -rf .build
