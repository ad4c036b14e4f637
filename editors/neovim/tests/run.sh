#!/usr/bin/env bash
# Runs every tests/test_*.lua in its own headless Neovim against the real daemon, each with a
# cleared environment, its own HOME, XDG directories, database and workspace.
#   NVIM_BIN      the Neovim to use (default: nvim on PATH; 0.10 or newer)
#   SIDECHAT_BIN  the daemon (default: target/debug/sidechat of this repository)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
nvim="${NVIM_BIN:-$(command -v nvim || true)}"
bin="${SIDECHAT_BIN:-$repo/target/debug/sidechat}"
[ -x "$nvim" ] || { echo "no Neovim found (set NVIM_BIN)" >&2; exit 1; }
[ -x "$bin" ] || { echo "no sidechat binary at $bin (cargo build, or set SIDECHAT_BIN)" >&2; exit 1; }
"$nvim" --headless --clean -l /dev/stdin <<<'if vim.fn.has("nvim-0.10") == 0 then print("Neovim 0.10 or newer is needed") os.exit(1) end'

status=0
for test in "$here"/test_*.lua; do
  [ -n "${1:-}" ] && [[ "$test" != *"$1"* ]] && continue
  tmp="$(mktemp -d)"
  mkdir -p "$tmp/home" "$tmp/ws" "$tmp/xdg/config" "$tmp/xdg/data" "$tmp/xdg/state" "$tmp/xdg/cache"
  echo "== $(basename "$test")"
  if ! (cd "$tmp/ws" && env -i \
      HOME="$tmp/home" PATH="/usr/local/bin:/usr/bin:/bin" TERM=dumb LANG=C.UTF-8 \
      XDG_CONFIG_HOME="$tmp/xdg/config" XDG_DATA_HOME="$tmp/xdg/data" \
      XDG_STATE_HOME="$tmp/xdg/state" XDG_CACHE_HOME="$tmp/xdg/cache" \
      SIDECHAT_BIN="$bin" SIDECHAT_TEST_TMP="$tmp" SIDECHAT_DEMO_DELAY_MS=2 \
      ${SIDECHAT_TEST_VERBOSE:+SIDECHAT_TEST_VERBOSE=1} \
      timeout 300 "$nvim" --headless --clean -l "$test"); then
    status=1
  fi
  rm -rf "$tmp"
done
exit $status
