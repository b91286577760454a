#!/usr/bin/env bash
# Re-pin this wrapper module to another Kubernetes release:
#
#   tests/controlplane/kube/pin.sh v1.35.4
#
# Rewrites go.mod (require k8s.io/kubernetes VERSION and a replace for every
# staging module that VERSION's own go.mod replaces with ./staging/..., each to
# the matching v0.X.Y) and regenerates go.sum with `go get -tool`. Commit both.
# The binaries are then rebuilt by ../build under a new cache key.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ $# -ne 1 ] || [[ ! $1 =~ ^v1\.[0-9]+\.[0-9]+$ ]]; then
    echo "usage: $0 v1.MINOR.PATCH" >&2
    exit 2
fi
version=$1
staging_version=v0.${version#v1.}
command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=-buildvcs=false

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
upstream_mod=$(cd "$scratch" && go mod download -json "k8s.io/kubernetes@$version" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[ -f "$upstream_mod" ] || { echo "cannot download k8s.io/kubernetes@$version go.mod" >&2; exit 1; }

go_line=$(awk '$1 == "go" { print $2; exit }' "$upstream_mod")
mapfile -t staging < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$upstream_mod" | sort -u)
[ "${#staging[@]}" -gt 0 ] || { echo "no staging replacements found in $upstream_mod" >&2; exit 1; }

{
    printf 'module agentcard.dev/controlplane/kube\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\n' "$go_line" "$version"
    printf '// Every staging module of k8s.io/kubernetes %s, pinned to its published version.\nreplace (\n' "$version"
    for m in "${staging[@]}"; do
        printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"
    done
    printf ')\n'
} > "$here/go.mod"
rm -f "$here/go.sum"

cd "$here"
# The explicit @version matters: without it `go get` moves to the newest release.
# The plane's two binaries, and the node's three (tests/node/).
packages=()
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
    packages+=("k8s.io/kubernetes/cmd/$c")
done
go get -tool "${packages[@]/%/@$version}"
go list -mod=readonly -deps "${packages[@]}" >/dev/null
echo "pinned k8s.io/kubernetes $version (${#staging[@]} staging modules at $staging_version)" >&2
