//go:build tools

// Package tools pins Prometheus and promtool (the chart's alert rules and dashboard queries are
// checked with them) for tests/tools/build.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
