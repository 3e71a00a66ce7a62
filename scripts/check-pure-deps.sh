#!/usr/bin/env bash
# Fails if a pure (sans-IO) crate's normal dependency tree contains an IO runtime or OS binding.
# The pure crates are the ones without their own clippy.toml (see the root clippy.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
# Crates the design requires to stay pure: an own clippy.toml would silently exempt them.
for crate in holdline-base holdline-sip holdline-proto holdline-agent holdline-overload \
  holdline-metrics holdline-netmodel holdline-sim; do
  if [ -f "crates/$crate/clippy.toml" ]; then
    echo "crate $crate must stay pure but ships its own clippy.toml"; status=1
  fi
done
for dir in crates/*/; do
  crate=$(basename "$dir")
  [ -f "$dir/clippy.toml" ] && continue
  tree=$(cargo tree -q --locked -p "$crate" -e normal --prefix none)
  if bad=$(grep -E '^(tokio|libc|socket2|mio|nix|async-std) ' <<<"$tree"); then
    echo "pure crate $crate depends on IO crates:"; echo "$bad"; status=1
  fi
  if ! grep -q '#!\[forbid(unsafe_code)\]' "$dir/src/lib.rs"; then
    echo "pure crate $crate lacks #![forbid(unsafe_code)] in src/lib.rs"; status=1
  fi
  echo "pure: $crate ok"
done
exit $status
