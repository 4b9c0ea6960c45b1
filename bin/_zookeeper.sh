# Sourced by bin/test and .ci/run: Debian's zookeeper package (ZooKeeper 3.8), the server the
# metadata store's ZooKeeper tests start, installed once where apt-get can be used. Where it
# cannot be had, say so: those tests then skip with the reason. MAGNETAR_NO_ZOOKEEPER=1 skips
# the installation.
ensure_zookeeper() {
  [ -f /usr/share/java/zookeeper.jar ] && return 0
  [ "${MAGNETAR_NO_ZOOKEEPER:-0}" = 1 ] && return 0
  apt_install "the ZooKeeper tests" zookeeper
}
