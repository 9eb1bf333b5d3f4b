# memofs: the three commands of the README, and their parts.
#   make mount [MNT=/tmp/memofs] [OPTS=size=1g,noatime]   build and mount (mem backend)
#   make test                                              every test, as CI runs them
#   make bench                                             the seeds' experiments (report in bench/results)

CARGO ?= cargo
MNT ?= /tmp/memofs
OPTS ?=
BIN := target/release/memofs

.PHONY: setup build mount umount test lint unit memcheck e2e conformance pytest bench clean

setup:
	bash scripts/setup.sh

build:
	$(CARGO) build --release -p memofs

mount: setup build
	mkdir -p $(MNT)
	$(BIN) mount $(if $(OPTS),-o $(OPTS)) $(MNT)
	@echo "memofs is mounted at $(MNT). Unmount with: make umount MNT=$(MNT)   (or: $(BIN) umount $(MNT))"

umount:
	$(BIN) umount $(MNT)

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace --exclude memofs-e2e

# The end-to-end suite runs twice: default options (as root, file data kernel-backed with
# FUSE passthrough) and passthrough=off (the server's own page store).
e2e:
	$(CARGO) build -p memofs
	$(CARGO) test -p memofs-e2e
	MEMOFS_E2E_OPTS=passthrough=off $(CARGO) test -p memofs-e2e

# The mem backend's and core's unit tests again under valgrind memcheck (the unsafe code is
# in the kernel-backed store and the transport's syscalls; Miri and the sanitizers need a
# nightly toolchain this project cannot install).
memcheck:
	@command -v valgrind >/dev/null || { echo "memcheck: valgrind not installed (apt-get install valgrind)"; exit 1; }
	$(CARGO) test --no-run -p memofs-mem -p memofs-core 2>&1 | grep -o 'target/debug/deps/[a-z_]*-[0-9a-f]*' | sort -u | \
	  while read t; do echo "valgrind $$t"; valgrind -q --error-exitcode=1 --leak-check=no $$t -q --test-threads=1 || exit 1; done

# pjdfstest (installed by scripts/setup.sh) on kernel tmpfs and on memofs (mem backend in
# both data modes, passthrough backend), all with allow_other: fails on every test case tmpfs
# passes and memofs does not (tests/e2e/tests/conformance.rs).
conformance:
	$(CARGO) build -p memofs
	$(CARGO) test -p memofs-e2e --test conformance

pytest:
	python3 -m pytest bench/tests -q

test: setup lint unit memcheck e2e conformance pytest

bench: setup build
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench seeds

clean:
	$(CARGO) clean
