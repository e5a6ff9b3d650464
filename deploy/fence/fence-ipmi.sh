#!/bin/sh
# fence-ipmi.sh — power the OTHER zone's node off through its BMC over IPMI
# (ipmitool, lanplus), for `dyad serve --fence-command`. Exit 0 only once
# the BMC reports the chassis power off; anything else means "not fenced",
# and dyad does not promote (it waits for an operator: dyad force-primary).
#
#   dyad serve ... --fence-command /etc/dyad/fence-ipmi.sh --fence-timeout 90s
#
# Settings come from a root-only file (default /etc/dyad/fence.env, or
# $DYAD_FENCE_ENV), one KEY=value a line:
#   BMC_HOST=10.0.2.250               the other node's BMC
#   BMC_USER=fence                    an IPMI user with the operator privilege
#   BMC_PASSWORD_FILE=/etc/dyad/bmc.pass   its password, alone in a root-only file
#   FENCE_WAIT=60                     seconds to wait for the power to be off
#   FENCE_POLL=2                      seconds between power status checks
# Keep FENCE_WAIT plus a margin below --fence-timeout: when the timeout
# ends the script, dyad kills it and everything it started.
#
# ipmitool reads the password from the file (-f), never from the command
# line. apt-get install ipmitool.
set -eu

env_file=${DYAD_FENCE_ENV:-/etc/dyad/fence.env}
# shellcheck disable=SC1090
. "$env_file"
: "${BMC_HOST:?BMC_HOST is not set in $env_file}"
: "${BMC_USER:?BMC_USER is not set in $env_file}"
: "${BMC_PASSWORD_FILE:?BMC_PASSWORD_FILE is not set in $env_file}"
FENCE_WAIT=${FENCE_WAIT:-60}
FENCE_POLL=${FENCE_POLL:-2}

ipmi() { ipmitool -I lanplus -H "$BMC_HOST" -U "$BMC_USER" -f "$BMC_PASSWORD_FILE" -N 5 -R 2 "$@"; }

# ipmitool prints "Chassis Power is on" or "Chassis Power is off".
status=$(ipmi chassis power status)
echo "fence-ipmi: $BMC_HOST: $status" >&2
case "$status" in
*" is off"*) exit 0 ;;
esac
ipmi chassis power off >&2
echo "fence-ipmi: power off sent" >&2

waited=0
while :; do
	status=$(ipmi chassis power status || true)
	case "$status" in
	*" is off"*)
		echo "fence-ipmi: $BMC_HOST: $status" >&2
		exit 0
		;;
	esac
	if [ "$(echo "$waited $FENCE_WAIT" | awk '{ print ($1 >= $2) }')" = 1 ]; then
		echo "fence-ipmi: $BMC_HOST still reports '$status' after ${FENCE_WAIT}s" >&2
		exit 1
	fi
	sleep "$FENCE_POLL"
	waited=$(echo "$waited $FENCE_POLL" | awk '{ print $1 + $2 }')
done
