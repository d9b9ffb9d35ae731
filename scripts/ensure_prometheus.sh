#!/usr/bin/env bash
# prometheus and promtool for the observability tests (Debian package "prometheus"); the tests start their
# own prometheus on a free loopback port and need no daemon. See apt_ensure.sh.
exec "$(dirname "$0")/apt_ensure.sh" "the observability tests" "prometheus promtool" prometheus
