#!/usr/bin/env bash
# Every command of README.md, run as written in a scratch copy (see readme_check.py).
set -euo pipefail
exec python3 "$(dirname "$0")/readme_check.py" "$@"
