#!/bin/sh
# Install one official MCP reference server (@modelcontextprotocol/server-NAME) at an exact
# version into a cache directory and print the path of its dist/index.js. Used through
# bench/install_official_memory_server.sh and bench/install_official_filesystem_server.sh,
# which pin the version each is tested with:
#
#   bench/install_official_server.sh NAME VERSION [CACHE_DIR]
#
# Cache directory: CACHE_DIR, else $COMPANYD_CACHE_DIR/official-NAME-server, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/companyd/official-NAME-server. Reuses an existing install.
# Needs node and npm (and network access the first time); tests never run this themselves.
set -eu
if [ $# -lt 2 ]; then
    echo "usage: install_official_server.sh NAME VERSION [CACHE_DIR]" >&2
    exit 64
fi
NAME=$1
VERSION=$2
PKG=@modelcontextprotocol/server-$NAME
ME=install_official_${NAME}_server
if [ $# -ge 3 ]; then
    DIR=$3
elif [ -n "${COMPANYD_CACHE_DIR:-}" ]; then
    DIR=$COMPANYD_CACHE_DIR/official-$NAME-server
else
    DIR=${XDG_CACHE_HOME:-$HOME/.cache}/companyd/official-$NAME-server
fi
DIR=$DIR/$VERSION
INDEX=$DIR/node_modules/$PKG/dist/index.js
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "$ME: node and npm are needed; install Node.js >= 18" >&2
    exit 69
fi
if [ ! -f "$INDEX" ]; then
    mkdir -p "$DIR"
    # --prefix keeps it out of any global install; the exact version is the one tested with.
    npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error "$PKG@$VERSION" >&2
fi
[ -f "$INDEX" ] || { echo "$ME: $INDEX missing after install" >&2; exit 70; }
echo "$INDEX"
