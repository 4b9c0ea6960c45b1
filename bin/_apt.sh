# Sourced by bin/test and .ci/run (before _browser.sh and _zookeeper.sh, which use it):
# `apt_install WHAT PACKAGE...` installs Debian packages quietly where apt-get can be used
# (as root, or through sudo without a password), updating the package lists once if the
# first try fails. Where it cannot, it says so and that WHAT will skip; never fails the caller.
apt_install() {
  what="$1"
  shift
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "bin/test: no apt-get to install $*; $what will skip" >&2
    return 0
  fi
  if [ "$(id -u)" = 0 ]; then
    sudo=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    echo "bin/test: not root and no sudo to install $*; $what will skip" >&2
    return 0
  fi
  echo "bin/test: installing $* (apt-get)" >&2
  if ! { $sudo apt-get install -y -q "$@" >/dev/null 2>&1 ||
         { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q "$@" >/dev/null 2>&1; }; }; then
    echo "bin/test: installing $* failed; $what will skip" >&2
  fi
}
