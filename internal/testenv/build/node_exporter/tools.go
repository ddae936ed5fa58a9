//go:build tools

// Package tools pins node_exporter's main package for go mod tidy.
package tools

import _ "github.com/prometheus/node_exporter"
