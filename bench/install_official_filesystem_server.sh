#!/bin/sh
# Install the official MCP filesystem server (docs/tools.md "Recipes") into a cache directory and
# print the path of its dist/index.js, for COMPANYD_OFFICIAL_FILESYSTEM_SERVER.
#
#   export COMPANYD_OFFICIAL_FILESYSTEM_SERVER="$(bench/install_official_filesystem_server.sh)"
#
# Cache directory: $1, else $COMPANYD_CACHE_DIR/official-filesystem-server, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/companyd/official-filesystem-server. Reuses an existing install.
# Needs node and npm (and network access the first time); tests never run this themselves.
set -eu
VERSION=2026.8.31
PKG=@modelcontextprotocol/server-filesystem
if [ $# -ge 1 ]; then
    DIR=$1
elif [ -n "${COMPANYD_CACHE_DIR:-}" ]; then
    DIR=$COMPANYD_CACHE_DIR/official-filesystem-server
else
    DIR=${XDG_CACHE_HOME:-$HOME/.cache}/companyd/official-filesystem-server
fi
DIR=$DIR/$VERSION
INDEX=$DIR/node_modules/$PKG/dist/index.js
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "install_official_filesystem_server: node and npm are needed; install Node.js >= 18" >&2
    exit 69
fi
if [ ! -f "$INDEX" ]; then
    mkdir -p "$DIR"
    # --prefix keeps it out of any global install; the exact version is the one the recipe is tested with.
    npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error "$PKG@$VERSION" >&2
fi
[ -f "$INDEX" ] || { echo "install_official_filesystem_server: $INDEX missing after install" >&2; exit 70; }
echo "$INDEX"
