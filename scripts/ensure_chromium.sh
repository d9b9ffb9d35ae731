#!/usr/bin/env bash
# Debian's chromium (and chromium-driver) for the web console's browser tests, which drive it with Playwright
# (tests/support/console_support.py; never `playwright install`, which downloads a browser). See apt_ensure.sh.
exec "$(dirname "$0")/apt_ensure.sh" "the console's browser tests" "chromium chromedriver" chromium chromium-driver
