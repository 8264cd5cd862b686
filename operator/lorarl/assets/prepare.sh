#!/bin/sh
# lorarl prepare: download the model and datasets of a LoraRLJob onto the job volume.
# Arguments come in fours: KIND (model|dataset) REPO LOCAL_DIR REVISION ("" = default branch).
# Idempotent: a download whose marker file names the same repo@revision is skipped; an
# interrupted one is resumed by `hf download` (it keeps partial files in LOCAL_DIR/.cache).
# HF_TOKEN and HF_ENDPOINT are read from the environment by huggingface_hub; never echoed.
set -eu

if [ $(( $# % 4 )) -ne 0 ]; then
  echo "prepare.sh: expected KIND REPO DIR REVISION quadruples, got $# arguments" >&2
  exit 2
fi

HF=hf
command -v hf >/dev/null 2>&1 || HF=huggingface-cli

mkdir -p "${LORARL_RUN_DIR:-/root/shared_data}"

while [ $# -gt 0 ]; do
  kind=$1 repo=$2 dir=$3 rev=$4
  shift 4
  want="$repo@${rev:-default}"
  marker="$dir/.lorarl-complete"
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ]; then
    echo "prepare: $kind $want already complete in $dir, skipping"
    continue
  fi
  mkdir -p "$dir"
  echo "prepare: downloading $kind $want into $dir"
  if [ "$kind" = dataset ]; then
    if [ -n "$rev" ]; then
      "$HF" download --repo-type dataset "$repo" --revision "$rev" --local-dir "$dir"
    else
      "$HF" download --repo-type dataset "$repo" --local-dir "$dir"
    fi
  else
    if [ -n "$rev" ]; then
      "$HF" download "$repo" --revision "$rev" --local-dir "$dir"
    else
      "$HF" download "$repo" --local-dir "$dir"
    fi
  fi
  printf '%s\n' "$want" > "$marker.tmp" && mv "$marker.tmp" "$marker"
done
echo "prepare: all inputs present"
