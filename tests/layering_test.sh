#!/usr/bin/env bash
# Runs layering_test.py with the system's python3: a py_test's stub starts `python`, which a
# minimal Debian 12 does not have (only python3).
exec python3 "$(dirname "$0")/layering_test.py" "$@"
