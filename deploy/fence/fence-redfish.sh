#!/bin/sh
# fence-redfish.sh — power the OTHER zone's node off through its BMC's
# Redfish API, for `dyad serve --fence-command`. Exit 0 only once the BMC
# reports the power off; anything else means "not fenced", and dyad does
# not promote (it waits for an operator: dyad force-primary).
#
#   dyad serve ... --fence-command /etc/dyad/fence-redfish.sh --fence-timeout 90s
#
# Settings come from a root-only file (default /etc/dyad/fence.env, or
# $DYAD_FENCE_ENV), one KEY=value a line:
#   BMC_URL=https://10.0.2.250        the other node's BMC (no trailing /)
#   BMC_USER=fence                    a BMC account allowed to reset
#   BMC_PASSWORD_FILE=/etc/dyad/bmc.pass   its password, alone in a root-only file
#   BMC_CACERT=/etc/dyad/bmc-ca.crt   the BMC's CA (empty: the system's CAs)
#   BMC_SYSTEM=1                      Systems member to reset (empty: the first)
#   FENCE_WAIT=60                     seconds to wait for PowerState Off
#   FENCE_POLL=2                      seconds between power state checks
# Keep FENCE_WAIT plus a margin below --fence-timeout: when the timeout
# ends the script, dyad kills it and everything it started.
#
# The password never appears on a command line (curl reads it from a
# config on stdin), so other users cannot see it in ps.
set -eu

env_file=${DYAD_FENCE_ENV:-/etc/dyad/fence.env}
# shellcheck disable=SC1090
. "$env_file"
: "${BMC_URL:?BMC_URL is not set in $env_file}"
: "${BMC_USER:?BMC_USER is not set in $env_file}"
: "${BMC_PASSWORD_FILE:?BMC_PASSWORD_FILE is not set in $env_file}"
BMC_CACERT=${BMC_CACERT:-}
BMC_SYSTEM=${BMC_SYSTEM:-}
FENCE_WAIT=${FENCE_WAIT:-60}
FENCE_POLL=${FENCE_POLL:-2}

password=$(cat "$BMC_PASSWORD_FILE")

# redfish METHOD PATH [BODY]: one request, the body on stdout; fails on an
# HTTP error status or after 20 s.
redfish() {
	set -- "$1" "$BMC_URL$2" "${3:-}"
	{
		# curl's config syntax: quote, escape backslashes and quotes.
		printf 'user = "%s"\n' "$(printf '%s:%s' "$BMC_USER" "$password" | sed 's/[\\"]/\\&/g')"
		if [ -n "$BMC_CACERT" ]; then printf 'cacert = "%s"\n' "$BMC_CACERT"; fi
	} | if [ -n "$3" ]; then
		curl -fsS --max-time 20 -K - -X "$1" -H 'Content-Type: application/json' -d "$3" "$2"
	else
		curl -fsS --max-time 20 -K - -X "$1" "$2"
	fi
}

# power_state: the system's PowerState (On, Off, PoweringOff, ...).
power_state() {
	redfish GET "$system" | tr -d '\n' | sed -n 's/.*"PowerState"[[:space:]]*:[[:space:]]*"\([A-Za-z]*\)".*/\1/p'
}

if [ -n "$BMC_SYSTEM" ]; then
	system=/redfish/v1/Systems/$BMC_SYSTEM
else
	system=$(redfish GET /redfish/v1/Systems | tr -d '\n' |
		sed -n 's/.*"Members"[[:space:]]*:[[:space:]]*\[[[:space:]]*{[[:space:]]*"@odata.id"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
	[ -n "$system" ] || { echo "fence-redfish: $BMC_URL lists no system" >&2; exit 1; }
fi

state=$(power_state)
echo "fence-redfish: $BMC_URL$system is $state" >&2
if [ "$state" != Off ]; then
	redfish POST "$system/Actions/ComputerSystem.Reset" '{"ResetType": "ForceOff"}' >/dev/null
	echo "fence-redfish: ForceOff sent" >&2
fi

# Success only once the BMC itself reports the power off.
waited=0
while :; do
	state=$(power_state || true)
	if [ "$state" = Off ]; then
		echo "fence-redfish: $BMC_URL$system is Off" >&2
		exit 0
	fi
	if [ "$(echo "$waited $FENCE_WAIT" | awk '{ print ($1 >= $2) }')" = 1 ]; then
		echo "fence-redfish: $BMC_URL$system still reports '$state' after ${FENCE_WAIT}s" >&2
		exit 1
	fi
	sleep "$FENCE_POLL"
	waited=$(echo "$waited $FENCE_POLL" | awk '{ print $1 + $2 }')
done
