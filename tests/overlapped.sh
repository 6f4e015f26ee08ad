#!/usr/bin/env bash
# Runs two commands at once and waits for both; each line they print is prefixed with its name, so the two stay
# readable side by side. Exits 1 when either failed (naming which), after both have ended.
# make test runs the unit and trainer tests (no cluster) beside the dev-cluster tests that must run alone, which
# mostly wait: a control plane down for 70 s, a node's 40 s grace.
#   usage: tests/overlapped.sh NAME1 COMMAND1 NAME2 COMMAND2
set -uo pipefail
[ $# -eq 4 ] || { echo "usage: $0 NAME1 COMMAND1 NAME2 COMMAND2" >&2; exit 2; }
prefixed() { bash -c "$2" 2>&1 | sed -u "s/^/[$1] /"; }
prefixed "$1" "$2" &
first=$!
prefixed "$3" "$4"
second=$?
wait "$first"
first=$?
failed=()
[ "$first" -eq 0 ] || failed+=("$1 (exit $first)")
[ "$second" -eq 0 ] || failed+=("$3 (exit $second)")
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}" >&2; exit 1; }
