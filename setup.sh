#!/usr/bin/env bash
# One command for a fresh machine: system packages (Java 17's JDK, graphviz, Maven and a C compiler) where
# missing, the virtual environment .venv with rstream and its dev tools, a Jupyter kernel, Apache
# RocketMQ's jars for LocalRocketMQ and the tests' gRPC Java client (fetched once by rocketmq/pom.xml into
# ~/.cache/rstream), then the main job (word count on the embedded broker, executed on Spark).
# Usage: bash setup.sh [--no-demo]
set -euo pipefail
cd "$(dirname "$0")"

say() { printf '\n== %s\n' "$*"; }

need_java() {
  command -v java >/dev/null 2>&1 || return 0
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [ -z "$v" ] || [ "$v" -lt 17 ]
}

apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "rstream setup: cannot install $* without root or sudo; install them yourself and rerun" >&2; exit 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "rstream setup: no apt-get here; install $* with your package manager and rerun" >&2; exit 1
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

pkgs=()
# the JDK, not only the runtime: the tests compile a small Java program (tests/support/java, Java's push consumer)
if need_java || ! command -v javac >/dev/null 2>&1; then pkgs+=(openjdk-17-jdk-headless); fi
if ! command -v dot >/dev/null 2>&1; then pkgs+=(graphviz); fi
# LocalRocketMQ (rstream/rocketmq/local.py): Maven fetches RocketMQ's jars unless they are cached already
# (the same folder local.py's default_lib() names); a C compiler builds its small bind shim.
rmq_version=$(sed -n 's:.*<rocketmq.version>\(.*\)</rocketmq.version>.*:\1:p' rocketmq/pom.xml)
rmq_lib=${RSTREAM_ROCKETMQ_LIB:-${XDG_CACHE_HOME:-$HOME/.cache}/rstream/rocketmq-$rmq_version/lib}
# The tests' gRPC Java client comes from the same pom, into a folder of its own (local.py's client_java_jar()).
client_java=$(sed -n 's:.*<rocketmq-client-java.version>\(.*\)</rocketmq-client-java.version>.*:\1:p' rocketmq/pom.xml)
client_jar=${XDG_CACHE_HOME:-$HOME/.cache}/rstream/rocketmq-client-java-$client_java/rocketmq-client-java-$client_java.jar
if ! command -v mvn >/dev/null 2>&1 && { [ ! -f "$rmq_lib/rocketmq-proxy-$rmq_version.jar" ] || [ ! -f "$client_jar" ]; }; then
  pkgs+=(maven)
fi
if ! command -v cc >/dev/null 2>&1; then pkgs+=(gcc libc6-dev); fi
if [ ${#pkgs[@]} -gt 0 ]; then
  say "installing system packages: ${pkgs[*]}"
  apt_install "${pkgs[@]}"
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "rstream setup: Python 3.10 or newer is needed ($PY is $("$PY" --version 2>&1))" >&2; exit 1
fi
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  if ! "$PY" -m venv .venv; then
    rm -rf .venv  # Debian's Python needs python3-venv for ensurepip
    apt_install python3-venv
    "$PY" -m venv .venv
  fi
fi
say "installing rstream into .venv"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c binder/constraints.txt -e ".[dev,bench]"  # the versions CI tests and Binder builds
.venv/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (rstream)" >/dev/null

say "Apache RocketMQ $rmq_version for LocalRocketMQ: its jars (fetched once), the bind shim, the tests' gRPC Java client"
.venv/bin/python -m rstream.rocketmq.local

if [ "${1:-}" != "--no-demo" ]; then
  say "running the main job: word count on the embedded broker, on Spark"
  .venv/bin/python -m rstream.demo
fi
