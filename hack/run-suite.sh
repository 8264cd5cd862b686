#!/usr/bin/env bash
# The whole suite as two pytest runs side by side: the real-node and image tests (most of their time
# is spent waiting on pods, Ray and containerd) beside the rest (the embedded control plane). On two
# cores this takes about the longer of the two instead of their sum. Each run has its own session
# (its own control plane); only the first starts the real node, so it stays one per machine.
#
# The rest streams to the terminal; the node run's output follows when both are done, and the last
# lines are both summaries. The exit code is non-zero when either run failed.
#
# usage: hack/run-suite.sh PYTHON [pytest args...]
set -uo pipefail
python=$1
shift

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# --durations: the slowest tests of each stream at its end, to keep the two streams balanced
"$python" -m pytest -p no:cacheprovider --durations=25 -m "node or images" "$@" >"$logs/node.log" 2>&1 &
node_pid=$!

"$python" -m pytest --durations=25 -m "not node and not images" "$@" 2>&1 | tee "$logs/rest.log"
rest_rc=${PIPESTATUS[0]}
wait "$node_pid"
node_rc=$?

echo
echo "================ the real-node and image tests (run beside the rest) ================"
cat "$logs/node.log"
echo
echo "run-suite: real node and images: $(tail -n 1 "$logs/node.log")"
echo "run-suite: the rest:             $(tail -n 1 "$logs/rest.log")"

# pytest exits 5 when a run selected nothing (e.g. no test is marked node in a subset): not a failure
for rc in "$rest_rc" "$node_rc"; do
	if [[ $rc -ne 0 && $rc -ne 5 ]]; then
		exit 1
	fi
done
