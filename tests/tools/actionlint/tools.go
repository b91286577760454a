//go:build tools

// Package tools pins actionlint (the release workflow's linter) for tests/tools/build.
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
