#!/usr/bin/env bash
# Installs headless Chromium from Debian's packages when it is missing; a second run is a
# no-op. A fresh machine (CI) gets it from here: `make browser` (a prerequisite of
# `make test`). tests/admin/test_browser.py drives the admin pages with it through selenium.
#   chromium         the browser (Debian's build; no browser is downloaded by selenium)
#   chromium-driver  /usr/bin/chromedriver of the same version, which selenium talks to
#   libnss3-tools    certutil: the tests put their serving CA into a private NSS database,
#                    so Chromium verifies the admin's certificate instead of ignoring errors
set -euo pipefail

need=()
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v certutil >/dev/null || need+=(libnss3-tools)
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
echo "installing ${need[*]} (Debian packages)"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  "${need[@]}" >/dev/null
echo "installed: $(chromium --version 2>/dev/null), $(chromedriver --version 2>/dev/null | cut -d' ' -f1-2)"
