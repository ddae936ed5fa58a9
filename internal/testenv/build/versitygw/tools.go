//go:build tools

// Package tools pins versitygw's main package for go mod tidy.
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
