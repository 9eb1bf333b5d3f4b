# memofs: the three commands of the README, and their parts.
#   make mount [MNT=/tmp/memofs] [OPTS=size=1g,noatime]   build, install and mount (mem backend)
#   make test                                              every test, as CI runs them
#   make bench [OUT=bench/reports/seeds]                   the seeds' experiments (report in bench/results, or OUT)
#   make vm-test KERNEL=6.19                               the guest-VM tests on one pinned kernel
#   make vm-test-all                                       ... on every kernel of scripts/vm/kernels.tsv
#   make vm-steps                                          requests per step of a small workload, per kernel
#   make xfstests                                          xfstests' quick group on memofs, tmpfs, passthrough_ll
#   make xfstests-guest [KERNEL=7.3]                       ... inside a guest over virtio-fs, memofs against virtiofsd
#   make bench-real [OUT=bench/reports/real]               real programs on real trees (fetches inputs once)
#   make bench-guest                                       work in a virtio-fs guest, memofs against virtiofsd
#   make bench-reports                                     every family of bench/reports, replaced
#   make install [PREFIX=/usr/local] [DESTDIR=]            binary, mount(8) helpers, man pages, completions
#   make uninstall                                         ... removed again
#   make deb                                               Debian package in target/deb
#   make install-deb                                       ... built and installed with dpkg -i
#   make package-test                                      install that package, mount through mount(8), purge

CARGO ?= cargo
MNT ?= /tmp/memofs
OPTS ?=
BIN := target/release/memofs
PREFIX ?= /usr/local
DESTDIR ?=
# mount(8) looks for mount.TYPE helpers in /sbin only (on Debian, /sbin is /usr/sbin).
SBINDIR ?= /sbin
BINDIR := $(PREFIX)/bin
# Where QEMU and libvirt look for vhost-user backends' descriptions (they take the first of a
# type in name order: 60- leaves virtiofsd's 50- first where both are installed).
VHOSTUSERDIR := $(PREFIX)/share/qemu/vhost-user
MAN1DIR := $(PREFIX)/share/man/man1
GEN := target/generated

.PHONY: xfstests xfstests-guest xfstests-ci attack migrate test-start no-leftovers bench-guest bench-reports setup setup-mount build install uninstall deb install-deb package-test mount umount test lint unit memcheck e2e conformance pytest vm-test vm-test-ci vm-test-all vm-steps bench bench-real clean

setup:
	bash scripts/setup.sh

# What building, installing and mounting need, and no more (make mount, make install-deb).
setup-mount:
	bash scripts/setup.sh mount

build:
	$(CARGO) build --release -p memofs

# The helpers are symbolic links to the binary: run as mount.memofs or mount.fuse.memofs, it
# speaks mount(8)'s helper protocol. Man pages and completions come from the same clap
# definitions as the command line (memofs generate).
install: build
	rm -rf $(GEN) && $(BIN) generate $(GEN)
	install -D -m 755 $(BIN) $(DESTDIR)$(BINDIR)/memofs
	install -d $(DESTDIR)$(SBINDIR)
	ln -sf $(BINDIR)/memofs $(DESTDIR)$(SBINDIR)/mount.memofs
	ln -sf $(BINDIR)/memofs $(DESTDIR)$(SBINDIR)/mount.fuse.memofs
	ln -sf memofs $(DESTDIR)$(BINDIR)/memofs-virtiofsd
	install -d $(DESTDIR)$(VHOSTUSERDIR)
	printf '{\n  "description": "memofs: an in-memory filesystem or an exported host directory for virtio-fs guests",\n  "type": "fs",\n  "binary": "%s"\n}\n' $(BINDIR)/memofs-virtiofsd >$(DESTDIR)$(VHOSTUSERDIR)/60-memofs.json
	install -D -m 644 -t $(DESTDIR)$(MAN1DIR) $(GEN)/man/man1/*.1
	install -D -m 644 $(GEN)/completions/bash/memofs.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/memofs
	install -D -m 644 $(GEN)/completions/zsh/_memofs $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_memofs
	install -D -m 644 $(GEN)/completions/fish/memofs.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/memofs.fish

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/memofs $(DESTDIR)$(SBINDIR)/mount.memofs $(DESTDIR)$(SBINDIR)/mount.fuse.memofs
	rm -f $(DESTDIR)$(BINDIR)/memofs-virtiofsd $(DESTDIR)$(VHOSTUSERDIR)/60-memofs.json
	rm -f $(DESTDIR)$(MAN1DIR)/memofs.1 $(DESTDIR)$(MAN1DIR)/memofs-*.1
	rm -f $(DESTDIR)$(PREFIX)/share/bash-completion/completions/memofs $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_memofs $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/memofs.fish

deb: build
	bash scripts/deb.sh

install-deb: setup-mount build
	dpkg -i "$$(bash scripts/deb.sh)"

package-test: build
	bash scripts/package-test.sh

mount: setup-mount install
	mkdir -p $(MNT)
	$(BINDIR)/memofs mount $(if $(OPTS),-o $(OPTS)) $(MNT)
	@echo "memofs is mounted at $(MNT). Unmount with: memofs umount $(MNT)   (or: make umount, umount $(MNT))"

umount:
	$(BIN) umount $(MNT)

# The code is checked for aarch64 too (system call numbers and C types differ there; the
# target and a C compiler for it come from scripts/setup.sh).
LINT_TARGET := aarch64-unknown-linux-gnu
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --target $(LINT_TARGET) --workspace --all-targets -- -D warnings

# The crates' own tests (no mount); a test skipped for lack of a required capability counts as
# failed, as in the e2e suite (scripts/unit.sh).
unit:
	MEMOFS_E2E_LACKS='$(E2E_LACKS)' CARGO=$(CARGO) bash scripts/unit.sh

# The end-to-end suite runs three times: default options (as root, file data kernel-backed
# with FUSE passthrough), passthrough=off (the server's own page store) and io_uring=on
# (requests through FUSE-over-io_uring, the host's module parameter set for that run and
# restored), then a summary (scripts/e2e.sh). A test skipped for lack of a required capability (root, /dev/fuse, FUSE
# passthrough, fanotify, the tools setup installs: tests/e2e/src/summary.rs) counts as failed.
# A machine without some of them: `make test E2E_LACKS=root,fanotify` reports those tests as
# skipped instead (never as passed).
E2E_LACKS ?=

e2e:
	MEMOFS_E2E_LACKS='$(E2E_LACKS)' CARGO=$(CARGO) bash scripts/e2e.sh

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

# The harness's own tests; their temporary files stay in target/pytest, not in /tmp.
pytest:
	python3 -m pytest bench/tests -q --basetemp=target/pytest

# Guest VMs (QEMU TCG) booted with Debian's kernel packages: the coherence and lookup-cache
# tests and a slice of the e2e suite on the kernels users run (scripts/vm/run.sh), and memofs
# served to the guest over virtio-fs by `memofs virtiofsd` (scripts/vm/virtiofs.sh). `make
# test` runs the kernels marked ci in scripts/vm/kernels.tsv; CI (CI=true) requires them to
# run.
VM_KERNELS_ALL := $(shell awk 'substr($$1, 1, 1) != "\043" && NF { print $$1 }' scripts/vm/kernels.tsv)
VM_KERNELS_CI := $(shell awk 'substr($$1, 1, 1) != "\043" && $$4 == "ci" { print $$1 }' scripts/vm/kernels.tsv)
VM_REQUIRED := $(if $(filter true 1,$(CI)),1,0)

vm-test:
	@test -n "$(KERNEL)" || { echo "usage: make vm-test KERNEL=ID (ids: $(VM_KERNELS_ALL))"; exit 1; }
	MEMOFS_VM_REQUIRED=$(VM_REQUIRED) bash scripts/vm/run.sh $(KERNEL)
	MEMOFS_VM_REQUIRED=$(VM_REQUIRED) bash scripts/vm/virtiofs.sh $(KERNEL)

vm-test-ci:
	MEMOFS_VM_REQUIRED=$(VM_REQUIRED) bash scripts/vm/run.sh $(VM_KERNELS_CI)
	MEMOFS_VM_REQUIRED=$(VM_REQUIRED) bash scripts/vm/virtiofs.sh $(VM_KERNELS_CI)
	MEMOFS_VM_REQUIRED=$(VM_REQUIRED) python3 scripts/vm/dfs-guest.py $(VM_KERNELS_CI)
	MEMOFS_VM_REQUIRED=$(VM_REQUIRED) python3 scripts/vm/labels-guest.py $(VM_KERNELS_CI)
	MEMOFS_VM_REQUIRED=$(VM_REQUIRED) python3 scripts/vm/managers.py $(lastword $(VM_KERNELS_CI))
	MEMOFS_VM_REQUIRED=$(VM_REQUIRED) python3 scripts/vm/migrate-guest.py $(lastword $(VM_KERNELS_CI))

vm-test-all:
	MEMOFS_VM_REQUIRED=$(VM_REQUIRED) bash scripts/vm/run.sh $(VM_KERNELS_ALL)

# The FUSE requests each step of a small real workload costs, on every kernel (counts, not
# times: docs/performance.md has the table).
vm-steps:
	MEMOFS_VM_PLAN=scripts/vm/steps.txt bash scripts/vm/run.sh $(VM_KERNELS_ALL)

# Processes the tests start must end with them: the first step notes the time, the last
# fails on any left (scripts/no-leftovers.sh says which).
TEST_STAMP := target/test-started
# The run's mark: every process the tests start inherits it, and the last step ends only
# processes that carry it (never a user's own mounts, or other work on the machine).
ifeq ($(origin MEMOFS_TEST_RUN),undefined)
MEMOFS_TEST_RUN := $(shell cat /proc/sys/kernel/random/uuid)
endif
export MEMOFS_TEST_RUN
test-start:
	bash scripts/no-leftovers.sh start $(TEST_STAMP)

no-leftovers:
	bash scripts/no-leftovers.sh check $(TEST_STAMP)

# A malicious virtio-fs guest (tests/vhost-attack) on the real socket of `memofs virtiofsd`:
# the mem backend and a shared directory, sandboxed as by default, a shared directory without
# the sandbox (the server's own checks alone must keep the guest inside), and both served by
# a plain user (scripts/attack.sh).
attack:
	CARGO=$(CARGO) bash scripts/attack.sh

# xfstests from third_party/xfstests (scripts/xfstests/build.sh, no network): the group
# XFSTESTS_GROUP on each of XFSTESTS_CONFIGS (scripts/xfstests/run.sh says what each is), then
# one report, target/xfstests/report.md. The quick group takes 30-50 minutes a configuration.
XFSTESTS_CONFIGS ?= tmpfs mem pages export passthrough_ll
XFSTESTS_GROUP ?= quick
xfstests: build
	bash scripts/xfstests/build.sh
	@for c in $(XFSTESTS_CONFIGS); do bash scripts/xfstests/run.sh $$c -g $(XFSTESTS_GROUP) || true; done
	python3 scripts/xfstests/report.py target/xfstests/results $(XFSTESTS_CONFIGS) >target/xfstests/report.md
	@echo "xfstests: report in target/xfstests/report.md"

# xfstests inside a guest over virtio-fs (scripts/xfstests/guest.sh, FSTYP=virtiofs): the tests
# of scripts/xfstests/guest-subset (or XFSTESTS_GUEST_TESTS) on `memofs virtiofsd`'s mem
# backend, its export and virtiofsd, then one report against virtiofsd,
# target/xfstests/guest-report.md. Under TCG this takes about 15 minutes a configuration.
XFSTESTS_GUEST_TESTS ?= $(shell sed 's/\#.*//' scripts/xfstests/guest-subset)
xfstests-guest: build
	bash scripts/xfstests/build.sh
	@for c in mem export virtiofsd; do bash scripts/xfstests/guest.sh $(or $(KERNEL),7.3) $$c $(XFSTESTS_GUEST_TESTS) || true; done
	python3 scripts/xfstests/report.py --ref guest-virtiofsd target/xfstests/results guest-virtiofsd guest-mem guest-export >target/xfstests/guest-report.md
	@echo "xfstests-guest: report in target/xfstests/guest-report.md"

# make test's part: fsstress and fsx on each memofs configuration, the same while `memofs
# upgrade` replaces the server 20 times, and the tests listed in scripts/xfstests/subset on
# the mem backend (every one passes there; under 10 minutes).
xfstests-ci: build
	bash scripts/xfstests/build.sh
	bash scripts/xfstests/stress.sh
	bash scripts/xfstests/upgrade-stress.sh
	RESULTS=target/xfstests/results/ci bash scripts/xfstests/run.sh mem $$(sed 's/#.*//' scripts/xfstests/subset)

# Live migration of a virtio-fs guest's mem filesystem (10 000 files, 1 GiB) from one
# `memofs virtiofsd` to another mid-stream, by a vhost-user frontend (scripts/migrate.sh).
migrate:
	CARGO=$(CARGO) bash scripts/migrate.sh

# Every suite runs even when one before it fails (a failure hides nothing after it); the
# run fails, naming each suite that did. Each suite's time is printed at its end and in the
# closing list (CI's limit is on the whole).
TEST_SUITES := lint unit memcheck e2e conformance xfstests-ci attack migrate package-test pytest vm-test-ci
test:
	@$(MAKE) --no-print-directory test-start setup
	@failed=; times=; for suite in $(TEST_SUITES) no-leftovers; do \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory $$suite || failed="$$failed $$suite"; \
		took=$$(( $$(date +%s) - start )); times="$$times $$suite=$${took}s"; \
		echo "make test: $$suite took $${took} s"; \
	done; \
	echo "make test: times:$$times"; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed" >&2; exit 1; fi; \
	echo "make test: every suite passed"

bench: setup build
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench seeds $(if $(OUT),--out $(OUT))

bench-real: setup build
	bench/memofs-bench fetch real
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench real $(if $(OUT),--out $(OUT))

# bench/reports: one current report per family, each replaced whole (about two hours on two
# idle cores): the seed experiments, real work, real work through FUSE-over-io_uring against
# /dev/fuse and libfuse's passthrough_hp, the uncached request path the same way (both with
# fuse.enable_uring set for that run only), the passthrough backend against libfuse's
# passthrough_ll and bindfs, memory per GiB and per file, and memofs without root (data path,
# creates, real work).
REPORTS := bench/reports
PT_TARGETS := memofs-pt,passthrough_ll,bindfs
MEM_TARGETS := tmpfs,tmpfs:-o huge=within_size,memofs,memofs:-o huge=within_size,memofs:-o passthrough=off
URING_TARGETS := tmpfs,memofs:-o io_uring=off,memofs:-o io_uring=on,passthrough_hp,passthrough_hp:-o io_uring
# every request reaching the server: no negative entries, memofs's page store, and
# passthrough_hp without its caches or FUSE passthrough
URING_UNCACHED := memofs:-o io_uring=off,negative_timeout=0,passthrough=off,memofs:-o io_uring=on,negative_timeout=0,passthrough=off,passthrough_hp:--nocache --nopassthrough,passthrough_hp:--nocache --nopassthrough -o io_uring
# without root: memofs served by an unprivileged user (memofs-user) against tmpfs and memofs
# as root, and the page store with and without the writeback cache
ROOTLESS_TARGETS := tmpfs,memofs,memofs-user,memofs-user:-o writeback=off
ROOTLESS_REAL := tmpfs,memofs,memofs:-o passthrough=off,memofs:-o passthrough=off,writeback=off,memofs-user
# the unprivileged page store with large files' read-only opens served direct
ROOTLESS_DIRECT := tmpfs,memofs-user,memofs-user:-o direct_io=large
# memofs over SeaweedFS (a fresh cluster per mount) against SeaweedFS's own mount: with the
# filer's change stream (the defaults) and without it.
DFS_TARGETS := seaweedfs,memofs-sw,memofs-sw:-o changes=off
# the same over JuiceFS, which has no change stream: memofs on its timeout-only path
DFS_JFS_TARGETS := juicefs,memofs-jfs
# a guest on virtiofsd against memofs's two backends, with the same --cache, and the
# guest's own tmpfs
GUEST_TARGETS := vm-virtiofsd:--cache=always,vm-memofs-pt:--cache=always,vm-memofs,vm-virtiofsd:--cache=auto,vm-memofs-pt:--cache=auto,vm-tmpfs
# --thread-pool-size 0, 1, 4 and 16 for memofs's two backends and virtiofsd, in 4 KiB random
# I/O in a guest of 1 and 2 vCPUs
FIO_TARGETS := vm-memofs-pt:--cache=auto --thread-pool-size=0,vm-memofs-pt:--cache=auto --thread-pool-size=1,vm-memofs-pt:--cache=auto --thread-pool-size=4,vm-memofs-pt:--cache=auto --thread-pool-size=16,vm-virtiofsd:--cache=auto --thread-pool-size=0,vm-virtiofsd:--cache=auto --thread-pool-size=1,vm-virtiofsd:--cache=auto --thread-pool-size=4,vm-virtiofsd:--cache=auto --thread-pool-size=16,vm-memofs:--cache=auto --thread-pool-size=0,vm-memofs:--cache=auto --thread-pool-size=1,vm-memofs:--cache=auto --thread-pool-size=4,vm-memofs:--cache=auto --thread-pool-size=16
# a guest's live migration: the mem backend with its files in its state and sent ahead, a
# shared directory, and virtiofsd's
MIGRATE_TARGETS := mig-memofs,mig-memofs-ahead,mig-memofs-pt,mig-virtiofsd
URING_PARAMS := -p stat-missing.loops=10000 -p stat-missing.counts=10000,1000000 -p loopdd.size=256M -p loopdd.bs=1M,4k -p lat-mmap.sizes=64M,256M,1G -p lat-mmap.iters=3
bench-reports: setup build
	bench/memofs-bench fetch real
	rm -rf $(REPORTS)/seeds $(REPORTS)/real $(REPORTS)/guest-fio $(REPORTS)/migrate $(REPORTS)/uring $(REPORTS)/uring-uncached $(REPORTS)/passthrough $(REPORTS)/memory $(REPORTS)/rootless $(REPORTS)/rootless-real $(REPORTS)/rootless-direct $(REPORTS)/dfs $(REPORTS)/dfs-juicefs $(REPORTS)/upgrade
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench seeds --out $(REPORTS)/seeds
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench real --out $(REPORTS)/real
	MEMOFS_BIN=$(CURDIR)/$(BIN) scripts/with-uring.sh bench/memofs-bench real --targets '$(URING_TARGETS)' --out $(REPORTS)/uring
	MEMOFS_BIN=$(CURDIR)/$(BIN) scripts/with-uring.sh bench/memofs-bench run stat-missing loopdd lat-mmap --targets '$(URING_UNCACHED)' $(URING_PARAMS) --out $(REPORTS)/uring-uncached
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench run stat-missing loopdd tree coherence --targets '$(PT_TARGETS)' --reps 3 --out $(REPORTS)/passthrough
	bash scripts/xfstests/build.sh
	PATH=$(CURDIR)/target/xfstests/src/ltp:$$PATH MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench run memory --targets '$(MEM_TARGETS)' --reps 3 --out $(REPORTS)/memory
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench run loopdd lat-mmap create --targets '$(ROOTLESS_TARGETS)' -p loopdd.size=512M -p lat-mmap.sizes=64M,256M,1G -p lat-mmap.iters=3 --reps 3 --out $(REPORTS)/rootless
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench real --targets '$(ROOTLESS_REAL)' --out $(REPORTS)/rootless-real
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench run loopdd bigfile --targets '$(ROOTLESS_DIRECT)' -p loopdd.size=512M --reps 3 --out $(REPORTS)/rootless-direct
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench run dfs --targets '$(DFS_TARGETS)' --reps 2 --out $(REPORTS)/dfs
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench run dfs --targets '$(DFS_JFS_TARGETS)' --reps 2 --out $(REPORTS)/dfs-juicefs
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench run guest --targets '$(GUEST_TARGETS)' --reps 3 --out $(REPORTS)/guest
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench run guest-fio --targets '$(FIO_TARGETS)' --reps 3 --out $(REPORTS)/guest-fio
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench run migrate --targets '$(MIGRATE_TARGETS)' --reps 4 --out $(REPORTS)/migrate
	mkdir -p $(REPORTS)/upgrade && python3 bench/upgrade-pause.py $(CURDIR)/$(BIN) | tee $(REPORTS)/upgrade/report.md

# Work in a virtio-fs guest (the guest family), memofs against virtiofsd (VIRTIOFSD, or on
# PATH: `cargo install virtiofsd`, with libseccomp-dev and libcap-ng-dev).
bench-guest: setup build
	bench/memofs-bench fetch guest
	MEMOFS_BIN=$(CURDIR)/$(BIN) bench/memofs-bench run guest --targets '$(GUEST_TARGETS)' --reps 3 $(if $(OUT),--out $(OUT))

clean:
	$(CARGO) clean
