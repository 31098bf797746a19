#!/usr/bin/env bash
# CI's run, timed as a new machine sees it: `CI=true bash .ci/run` on a fresh clone of HEAD (in a temporary folder,
# no standard input) with marl_envs' caches moved aside (cold: JAX's compilation cache, Brax's exported envs, the
# env names and the docs catalogue's entries, all under ${XDG_CACHE_HOME:-~/.cache}/marl_envs), then again on a
# second fresh clone with the caches the first run left (warm). Prints each phase's time; the caches that were there
# before are put back at the end. pip's own cache is left as it is.
#
#   bash scripts/ci_cold.sh          (or: make ci-cold)     cold, then warm
#   bash scripts/ci_cold.sh cold                            cold only
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/marl_envs
WORK=$(mktemp -d "${TMPDIR:-/tmp}/marl-envs-ci.XXXXXX")
RUNS=${1:-cold warm}

saved=""
if [ -e "$CACHE" ]; then
  saved="$CACHE.aside.$$"
  mv "$CACHE" "$saved"
fi
restore() {
  if [ -n "$saved" ]; then
    rm -rf "$CACHE"
    mv "$saved" "$CACHE"
  fi
}
trap restore EXIT

echo "clone of $(git -C "$ROOT" rev-parse --short HEAD) on $(hostname), $(nproc) cores, $(date -u +%Y-%m-%d); logs in $WORK"
for label in $RUNS; do
  git clone -q "$ROOT" "$WORK/$label"
  start=$SECONDS
  if (cd "$WORK/$label" && CI=true bash .ci/run </dev/null >"$WORK/$label.log" 2>&1); then
    status=passed
  else
    status=FAILED
  fi
  echo "$label: .ci/run $status in $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s"
  grep -E "^phase: |^=+ .*(passed|failed).* in " "$WORK/$label.log" | sed 's/^/  /'
  rm -rf "$WORK/$label"  # the clone's virtualenvs (GBs); the log stays
  [ "$status" = passed ] || exit 1
done
