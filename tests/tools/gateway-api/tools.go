//go:build tools

// Package tools pins the Gateway API module (the version Traefik v3.6.12 uses) for its
// standard CRDs (config/crd/standard), which tests/tools/build locates.
package tools

import _ "sigs.k8s.io/gateway-api/apis/v1"
