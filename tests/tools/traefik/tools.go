//go:build tools

// Package tools pins Traefik (github.com/traefik/traefik/v3/cmd/traefik) for tests/tools/build.
package tools

import _ "github.com/traefik/traefik/v3/cmd/traefik"
