// Package layers holds the test that keeps devata's packages depending one
// way (DESIGN.md's Layout; docs/architecture.md draws it). It has no code.
package layers
