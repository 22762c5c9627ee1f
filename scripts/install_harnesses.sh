#!/usr/bin/env bash
# Installs the agent harness CLIs the e2e tests drive, project-locally into .harness/ (never globally).
# Pinned versions; idempotent: a package already installed at its pinned version is skipped.
# Add a harness by adding one "name@version" line to PACKAGES.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX="${HARNESS_DIR:-.harness}"

PACKAGES=(
  "@openai/codex@0.171.0"
  "@anthropic-ai/claude-code@2.1.332"
)

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
  [ "$(installed_version "$name")" = "$version" ] || missing+=("$spec")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_harnesses: installing ${missing[*]} into $PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --save-exact "${missing[@]}"
fi
echo "install_harnesses: ready in $PREFIX/node_modules/.bin"
