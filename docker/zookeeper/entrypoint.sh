#!/bin/bash
# Writes zoo.cfg from the official image's variables (ZOO_TICK_TIME, ...) and runs ZooKeeper in the
# foreground, so the same compose settings work with this image and with the official one.
set -euo pipefail
tick=${ZOO_TICK_TIME:-2000}
cat > /conf/zoo.cfg <<CFG
tickTime=${tick}
dataDir=/data
dataLogDir=/datalog
clientPort=2181
initLimit=${ZOO_INIT_LIMIT:-5}
syncLimit=${ZOO_SYNC_LIMIT:-2}
maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-0}
minSessionTimeout=$((2 * tick))
maxSessionTimeout=${ZOO_MAX_SESSION_TIMEOUT:-60000}
admin.enableServer=false
4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr,ruok,stat,mntr}
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
CFG
exec java -Xmx${ZOO_HEAP_MB:-256}m -XX:+UseSerialGC -Dzookeeper.admin.enableServer=false \
    -cp /conf:/usr/share/java/zookeeper.jar org.apache.zookeeper.server.ZooKeeperServerMain /conf/zoo.cfg
