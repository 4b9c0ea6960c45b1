# Sourced by bin/test: Debian's chromium and chromium-driver for the web console's browser
# tests (tests/e2e/test_console*.py), installed once where apt-get can be used. Where they
# cannot be had, say so: those tests then skip with the reason. MAGNETAR_NO_BROWSER=1 skips
# the installation.
ensure_browser() {
  [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && return 0
  [ "${MAGNETAR_NO_BROWSER:-0}" = 1 ] && return 0
  apt_install "the console's browser tests" chromium chromium-driver
}
