//go:build tools

// Package tools pins Vault (github.com/hashicorp/vault, its main package) for tests/tools/build.
package tools

import _ "github.com/hashicorp/vault"
