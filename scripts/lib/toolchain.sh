# shellcheck shell=bash
# Sourced by scripts/run and scripts/test. Do not execute.
#
# require_build_tools NAME
#   Returns 1, saying what is missing as NAME, unless the tools the build needs beside Rust
#   are here: cc (Rust links with it, and the ring crate compiles C) and make (jemalloc, the
#   default allocator, is built with it). Said before cargo would fail obscurely.
require_build_tools() {
  local name=$1
  if ! command -v cc >/dev/null 2>&1; then
    echo "$name: a C compiler is needed (cc not found); on Debian/Ubuntu: apt-get install gcc" >&2
    return 1
  fi
  if ! command -v make >/dev/null 2>&1; then
    echo "$name: make is needed to build jemalloc (make not found); on Debian/Ubuntu: apt-get install make" >&2
    return 1
  fi
}
