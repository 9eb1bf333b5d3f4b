#!/bin/sh
# quickstart.sh [TARGET] [VAR=value ...]: `make TARGET` (default: mount) on a machine that may
# not have make yet. A fresh Debian install has neither make nor a C linker (cargo needs one),
# so this installs what building and mounting need first (scripts/setup.sh mount), then runs
# make with the arguments given: `scripts/quickstart.sh`, `scripts/quickstart.sh mount
# MNT=/scratch OPTS=size=2g`, `scripts/quickstart.sh install-deb`, `scripts/quickstart.sh test`.
set -eu
cd "$(dirname "$0")/.."
bash scripts/setup.sh mount
[ "$#" -gt 0 ] || set -- mount
exec make "$@"
