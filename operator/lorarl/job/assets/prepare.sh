#!/bin/sh
# lorarl prepare: download the model and datasets of a LoraRLJob onto the job volume.
# Arguments come in fours: KIND SOURCE DIR REVISION, KIND being
#   model|dataset  SOURCE a Hub repository, REVISION "" = main (as for hf);
#   uri            SOURCE an https:// or s3:// URI, fetched by fetch.py beside this script;
#   path           SOURCE = DIR, already on the volume (spec.*.path): only checked, never written.
# Every value reaches hf as --revision=R or after "--", never where it could parse as an option.
#
# DIR is unique per (repository, revision) (lorarl.command.input_dir), and may live on a volume
# that other jobs share and read while this runs. So a DIR is never written in place:
# - it is complete iff it exists: the download goes to DIR@partial and is renamed to DIR in
#   one rename(2) after its marker file (.lorarl-complete) is written; a complete DIR is skipped
#   and never modified;
# - preparers of one DIR (two jobs, or a retry beside a stuck pod) take turns on an flock(1)
#   of DIR@lock; the kernel (or the NFS lock manager) drops the lock when its holder dies, and
#   the next holder resumes the download left in DIR@partial (`hf download` keeps its partial
#   files in DIR@partial/.cache).
# No input directory ends in @lock or @partial (input_dir percent-encodes '@' in revisions).
# HF_TOKEN and HF_ENDPOINT are read from the environment by huggingface_hub; never echoed.
set -eu

# fail CODE MESSAGE: one line on stderr and in the termination message, which the kubelet puts
# into the pod's status (terminationMessagePath, default /dev/termination-log): the operator
# reports it without reading any log
TERMINATION_LOG=${LORARL_TERMINATION_LOG:-/dev/termination-log}
fail() {
  echo "prepare.sh: $2" >&2
  printf '%s\n' "$2" > "$TERMINATION_LOG" 2>/dev/null || true
  exit "$1"
}
fetch_failed() {
  fail 4 "could not download $1 (hf download exited $2; its output is in the log of container prepare)"
}

if [ $(( $# % 4 )) -ne 0 ]; then
  fail 2 "expected KIND REPO DIR REVISION quadruples, got $# arguments"
fi
if ! command -v flock >/dev/null 2>&1; then
  fail 2 "flock (util-linux) is missing from the prepare image; spec.dataPrep.image must provide it"
fi

HF=hf
command -v hf >/dev/null 2>&1 || HF=huggingface-cli

mkdir -p "${LORARL_RUN_DIR:-/root/shared_data}"

while [ $# -gt 0 ]; do
  kind=$1 repo=$2 dir=$3 rev=$4
  shift 4
  if [ "$kind" = path ]; then
    if [ ! -e "$dir" ]; then
      echo "prepare.sh: $dir is not on the job volume (spec.model.path or a dataset's path names it): place it there first" >&2
      exit 3
    fi
    echo "prepare: $dir is on the volume, nothing to download"
    continue
  fi
  want="$repo@${rev:-main}"
  [ "$kind" = uri ] && want=$repo
  partial="$dir@partial"
  mkdir -p "$(dirname "$dir")"
  # fd 9 holds the lock until it is closed below (or this process and its children die)
  exec 9>>"$dir@lock"
  if ! flock -n 9; then
    echo "prepare: waiting for another preparer of $kind $want"
    flock 9
  fi
  if [ -f "$dir/.lorarl-complete" ]; then
    echo "prepare: $kind $want already complete in $dir, skipping"
  elif [ -e "$dir" ]; then
    fail 3 "$dir exists but is not a complete download (no .lorarl-complete); it is left as it is: remove it, or set spec.dataPrep.skip if it holds the inputs"
  else
    mkdir -p "$partial"
    echo "prepare: downloading $kind $want into $partial"
    if [ "$kind" = uri ]; then
      python3 "$(dirname "$0")/fetch.py" "$repo" "$partial" || fetch_failed "$kind $want" $?
    elif [ "$kind" = dataset ]; then
      if [ -n "$rev" ]; then
        "$HF" download --repo-type dataset --revision="$rev" --local-dir "$partial" -- "$repo" || fetch_failed "$kind $want" $?
      else
        "$HF" download --repo-type dataset --local-dir "$partial" -- "$repo" || fetch_failed "$kind $want" $?
      fi
    else
      if [ -n "$rev" ]; then
        "$HF" download --revision="$rev" --local-dir "$partial" -- "$repo" || fetch_failed "$kind $want" $?
      else
        "$HF" download --local-dir "$partial" -- "$repo" || fetch_failed "$kind $want" $?
      fi
    fi
    printf '%s\n' "$want" > "$partial/.lorarl-complete"
    # -T: rename onto DIR itself (fails rather than nesting if DIR appeared); one rename(2)
    mv -T "$partial" "$dir"
    echo "prepare: $kind $want complete in $dir"
  fi
  exec 9>&-
done
echo "prepare: all inputs present"
