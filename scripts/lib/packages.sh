# Sourced by scripts/test and scripts/demo-node: install the Debian packages that provide
# missing commands, as root or with passwordless sudo; otherwise stop, naming the one apt-get
# command to run.
#
#   ensure_packages ip=iproute2 chromium=chromium /usr/lib/cni/bridge=containernetworking-plugins
#
# Each argument is COMMAND=PACKAGE; a COMMAND with a slash is a file path checked for.
ensure_packages() {
  local spec cmd pkg missing=()
  for spec in "$@"; do
    cmd=${spec%%=*}
    pkg=${spec#*=}
    if [[ $cmd == */* ]]; then
      [ -e "$cmd" ] || missing+=("$pkg")
    else
      command -v "$cmd" >/dev/null || missing+=("$pkg")
    fi
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  local as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      as_root=(sudo -n)
    else
      echo "missing Debian packages: ${missing[*]}. Install them as root, then run this again:" >&2
      echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
  fi
  echo "   installing ${missing[*]}"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # With recommends: chromium's fonts (fonts-liberation) lay the web page out as tested.
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}
