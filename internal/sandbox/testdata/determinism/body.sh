echo "wall $(date +%s.%N) $(date -u)"
read up _ < /proc/uptime; echo "monotonic ${up%%.*}"
echo "epoch $EPOCHSECONDS $EPOCHREALTIME $(printf '%(%s %F %T)T' -1)"
echo "random $SRANDOM $SRANDOM bash $RANDOM $RANDOM $(echo $RANDOM)"
echo "uuid $(od -An -tx1 -N16 /dev/urandom | tr -d ' ')"
echo "host $(hostname) user $(id -un) umask $(umask)"
echo "address $(grep -E 'stack|heap' /proc/self/maps | cut -d' ' -f1 | tr '\n' ' ')"
echo "pid $$ $BASHPID"
/usr/bin/python3 -c 'import os; print("child", os.getpid(), os.getppid())'
