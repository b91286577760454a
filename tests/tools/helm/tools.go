//go:build tools

// Package tools pins helm (helm.sh/helm/v3/cmd/helm) for tests/tools/build.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
