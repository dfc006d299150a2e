#!/bin/sh
# Install the official MCP filesystem server (docs/tools.md "Recipes") and print the path of
# its dist/index.js, for COMPANYD_OFFICIAL_FILESYSTEM_SERVER:
#
#   export COMPANYD_OFFICIAL_FILESYSTEM_SERVER="$(bench/install_official_filesystem_server.sh)"
#
# $1: the cache directory (see bench/install_official_server.sh). The exact version is the
# one the recipe is tested with.
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
exec "$here/install_official_server.sh" filesystem 2026.8.31 "$@"
