#!/bin/sh
# Install the official MCP memory server (the interop anchor) and print the path of its
# dist/index.js, for COMPANYD_OFFICIAL_MEMORY_SERVER:
#
#   export COMPANYD_OFFICIAL_MEMORY_SERVER="$(bench/install_official_memory_server.sh)"
#
# $1: the cache directory (see bench/install_official_server.sh). The exact version is the
# reference anchor of the interop tests and benchmarks.
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
exec "$here/install_official_server.sh" memory 2026.8.31 "$@"
