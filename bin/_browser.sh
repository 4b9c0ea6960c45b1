# Sourced by bin/test: Debian's chromium and chromium-driver for the web console's browser
# tests (tests/e2e/test_console*.py), installed once where apt-get can be used. Where they
# cannot be had, say so: those tests then skip with the reason. MAGNETAR_NO_BROWSER=1 skips
# the installation.
ensure_browser() {
  [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && return 0
  [ "${MAGNETAR_NO_BROWSER:-0}" = 1 ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "bin/test: no apt-get to install chromium; the console's browser tests will skip" >&2
    return 0
  fi
  if [ "$(id -u)" = 0 ]; then
    sudo=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    echo "bin/test: not root and no sudo to install chromium; the console's browser tests will skip" >&2
    return 0
  fi
  echo "bin/test: installing chromium and chromium-driver (apt-get)" >&2
  if ! { $sudo apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 ||
         { $sudo apt-get update -q >/dev/null 2>&1 &&
           $sudo apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; }; then
    echo "bin/test: installing chromium failed; the console's browser tests will skip" >&2
  fi
}
