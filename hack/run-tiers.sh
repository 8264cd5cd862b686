#!/usr/bin/env bash
# The suite's tiers (tests/conftest.py says which test is in which; docs/development.md their cost):
#   unit  no server, no cluster: both cores (pytest -n 2), at the newest and at the lowest versions
#   api   one real control plane per fixture (tests/conftest.py), local servers and venvs; two workers
#   e2e   the real node and the images
#   all   the three, fastest first; it stops at the first tier that fails
#
# `all` runs api and e2e side by side once unit passed: e2e mostly waits on pods, Ray and
# containerd, so the two take about the longer of them instead of their sum. When api fails, e2e is
# stopped (SIGTERM: the harness tears its node down, lorarl_dev.controlplane.exit_hooks); when e2e
# fails, api finishes and both are reported. Each tier prints its slowest 20 tests; the last lines
# are each tier's wall time and result, then the tests' total.
#
# usage: hack/run-tiers.sh unit|api|e2e|all [pytest args...]
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: hack/run-tiers.sh unit|api|e2e|all [pytest args...]}
shift
PY=${PY:-.venv/bin/python}
LOWEST_PY=${LOWEST_PY:-.venv-lowest/bin/python}
PYTEST=(-p no:cacheprovider --durations=20)

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
results=()

# pytest's closing line ("== 910 passed, 2 skipped in 83.95s ==", or without the rules under -q)
closing() {
	grep -aE '^(=+ )?[0-9]+ (passed|failed|errors?|skipped|deselected).* in [0-9.]+s|no tests ran' "$1" | tail -n 1 | sed -E 's/^=+ //; s/ =+$//'
}

# run LOG CMD...: the command's output to LOG (and the terminal when LOG ends in .tee)
run() {
	local log=$1
	shift
	if [[ $log == *.tee ]]; then
		"$@" 2>&1 | tee "$log"
		return "${PIPESTATUS[0]}"
	fi
	"$@" >"$log" 2>&1
}

# pytest exits 5 when it selected nothing: not a failure
ok() { [[ $1 -eq 0 || $1 -eq 5 ]]; }

tier_unit() {
	local t0=$SECONDS rc=0
	run "$logs/unit.tee" "$PY" -m pytest --tier unit -n 2 "${PYTEST[@]}" "$@" || rc=$?
	local newest=$rc
	# the same tests with every runtime dependency at the lowest version of its range
	# (hack/constraints-lowest.txt); tests/image installs the newest versions into a venv of its
	# own and tests/reporter is stdlib-only: neither exercises a runtime dependency of ours. The
	# property tests draw 100 examples here, not 500: the depth of the search is the newest run's
	if ok "$newest"; then
		run "$logs/unit-lowest.tee" env LORARL_FUZZ_EXAMPLES=100 "$LOWEST_PY" -m pytest --tier unit -n 2 -q -p no:cacheprovider \
			--ignore=tests/image --ignore=tests/reporter "$@" || rc=$?
	fi
	results+=("unit: $((SECONDS - t0)) s, newest: $(closing "$logs/unit.tee"); lowest: $(closing "$logs/unit-lowest.tee" 2>/dev/null)")
	ok "$rc"
}

tier_api() {
	local t0=$SECONDS rc=0 log=${1:-$logs/api.tee}
	shift || true
	# the operator on the real API server at the lowest versions: the client, kopf and the RBAC it needs
	run "$logs/api-lowest.log" "$LOWEST_PY" -m pytest -q -p no:cacheprovider tests/operator/test_operator_rbac.py \
		tests/operator/test_operator.py::test_success_sequence_and_kubectl_wait || rc=$?
	if ! ok "$rc"; then
		cat "$logs/api-lowest.log"
	fi
	# two workers, a test file each at a time (its module fixtures stay in one process): the tier
	# waits on control planes, operators and controllers about half of its time (measured: 1,239
	# CPU-s in 2,357 s alone), so a second worker fills those waits
	run "$log" "$PY" -m pytest --tier api -n 2 --dist loadfile "${PYTEST[@]}" "$@" || rc=$?
	results+=("api: $((SECONDS - t0)) s, $(closing "$log"); lowest: $(closing "$logs/api-lowest.log")")
	ok "$rc"
}

tier_e2e() {
	local t0=$SECONDS rc=0 log=${1:-$logs/e2e.tee}
	shift || true
	run "$log" "$PY" -m pytest --tier e2e "${PYTEST[@]}" "$@" || rc=$?
	local end
	end=$(closing "$log")
	results+=("e2e: $((SECONDS - t0)) s, ${end:-stopped before its summary}")
	ok "$rc"
}

summary() {
	echo
	local line
	for line in "${results[@]}"; do
		echo "run-tiers: $line"
	done
	# one closing line for the whole run: the tests of every tier added up
	local passed=0 failed=0 skipped=0 n word
	while read -r n word; do
		case $word in
		passed) passed=$((passed + n)) ;;
		failed | error | errors) failed=$((failed + n)) ;;
		skipped) skipped=$((skipped + n)) ;;
		esac
	done < <(for f in "$logs"/*.tee "$logs"/*.log; do [[ -f $f ]] && closing "$f"; done | grep -oE '[0-9]+ (passed|failed|errors?|skipped)')
	echo "tests: $passed passed, $failed failed, $skipped skipped"
}

rc=0
case $what in
unit) tier_unit "$@" || rc=1 ;;
api) tier_api "$logs/api.tee" "$@" || rc=1 ;;
e2e) tier_e2e "$logs/e2e.tee" "$@" || rc=1 ;;
all)
	if tier_unit "$@"; then
		# e2e beside api, its output shown when both are done
		(tier_e2e "$logs/e2e.log" "$@" && echo ok >"$logs/e2e.ok"; printf '%s\n' "${results[@]: -1}" >"$logs/e2e.result") &
		e2e_pid=$!
		if ! tier_api "$logs/api.tee" "$@"; then
			rc=1
			if kill -0 "$e2e_pid" 2>/dev/null; then
				echo "run-tiers: the api tier failed: stopping the e2e tier"
				pkill -TERM -P "$e2e_pid" 2>/dev/null
			fi
		fi
		wait "$e2e_pid"
		echo
		echo "================ the e2e tier (run beside the api tier) ================"
		cat "$logs/e2e.log"
		[[ -f $logs/e2e.result ]] && results+=("$(cat "$logs/e2e.result")")
		[[ -f $logs/e2e.ok ]] || rc=1
	else
		rc=1
		results+=("api, e2e: not run (the unit tier failed)")
	fi
	;;
*)
	echo "run-tiers: unknown tier '$what' (unit, api, e2e or all)" >&2
	exit 2
	;;
esac
summary
exit $rc
