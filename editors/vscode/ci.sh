#!/usr/bin/env bash
# The VS Code extension's checks, as .ci/run runs them: installs Debian's Chromium when missing
# (for the end-to-end test), installs the locked npm packages, then type-checks (including that
# the wire types are current with schema/), builds, runs the unit, extension-host and
# end-to-end tests against the daemon built by `cargo test` (the page in a browser, served by the
# daemon, among them), and packages the .vsix.
set -euo pipefail
cd "$(dirname "$0")"
repo="$(cd ../.. && pwd)"

if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi
[ -x "$repo/target/debug/sidechat" ] || (cd "$repo" && cargo build --quiet)

npm ci --no-audit --no-fund --silent
# A cleared environment with a scratch home: nothing of this machine's config or keys.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
env -i PATH="$PATH" HOME="$scratch" SIDECHAT_BIN="$repo/target/debug/sidechat" npm test
npm run package --silent
