#!/bin/sh
# shardcast-entrypoint — the container's entrypoint: derive the replica
# number of a scaled-out shardcastd from its pod's StatefulSet ordinal, then
# exec shardcastd with the arguments given.
#
# Rule: with SHARDCAST_REPLICAS = R > 1 and SHARDCAST_REPLICA unset or
# empty, the replica number J is the ordinal that ends the pod name: pod
# "shardcast-2" of a StatefulSet is replica 2 of R. The pod name comes from
# SHARDCAST_POD_NAME (the manifests set it from the downward API,
# metadata.name), else from the host name, which Kubernetes sets to the pod
# name. J must be a decimal number below R; anything else is a
# configuration error and the container exits with status 2 before
# shardcastd starts, so a StatefulSet scaled past SHARDCAST_REPLICAS never
# serves a wrong part of an epoch (the pod crash-loops, visibly).
# An explicit SHARDCAST_REPLICA (for example from the downward API label
# apps.kubernetes.io/pod-index on Kubernetes >= 1.28) is passed on as it
# is; shardcastd checks it against R itself.
#
# SHARDCAST_DAEMON names the binary to exec (default
# /usr/local/bin/shardcastd); the tests point it at a build tree.
set -eu

daemon=${SHARDCAST_DAEMON:-/usr/local/bin/shardcastd}

die() {
    echo "shardcast-entrypoint: $*" >&2
    exit 2
}

# A canonical decimal (no sign, no leading zero) of at most 9 digits, so
# that $(( )) never reads it as octal or overflows.
canonical_decimal() {
    case $1 in
        '' | *[!0-9]* | 0?*) return 1 ;;
    esac
    [ ${#1} -le 9 ]
}

replicas=${SHARDCAST_REPLICAS:-1}
canonical_decimal "$replicas" && [ "$replicas" -ge 1 ] ||
    die "SHARDCAST_REPLICAS='$replicas' is not a replica count (1, 2, ...)"

if [ "$replicas" -gt 1 ] && [ -z "${SHARDCAST_REPLICA:-}" ]; then
    pod=${SHARDCAST_POD_NAME:-$(uname -n)}
    ordinal=${pod##*-}
    [ "$ordinal" != "$pod" ] ||
        die "pod name '$pod' has no '-<ordinal>' suffix; set SHARDCAST_REPLICA"
    canonical_decimal "$ordinal" ||
        die "pod name '$pod' does not end in a StatefulSet ordinal"
    [ "$ordinal" -lt "$replicas" ] ||
        die "pod '$pod' is ordinal $ordinal but SHARDCAST_REPLICAS=$replicas:" \
            "scale the StatefulSet and SHARDCAST_REPLICAS together"
    SHARDCAST_REPLICA=$ordinal
    export SHARDCAST_REPLICA
fi

exec "$daemon" "$@"
