// Package testctx holds contexts for tests that must stop work part-way,
// however fast the machine running them.
package testctx

import (
	"context"
	"sync/atomic"
)

// CancelAfter is a context that turns cancelled once its Err has been asked
// n times: cancelled mid-run, however fast the machine running the test.
func CancelAfter(n int64) context.Context {
	c := &countdown{Context: context.Background()}
	c.left.Store(n)
	return c
}

type countdown struct {
	context.Context
	left atomic.Int64
}

func (c *countdown) Err() error {
	if c.left.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}
