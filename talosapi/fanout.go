package talosapi

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"devata.dev/devata/inventory"
)

// ForEach runs fn for every machine with at most concurrency at once, each
// under its own timeout. One machine's failure never stops the others: every
// error is returned, wrapped with the machine's name, in inventory order. When
// ctx is cancelled no new machine is started; the ones in flight see the
// cancellation through their context.
func ForEach(ctx context.Context, ms []*inventory.Machine, concurrency int, timeout time.Duration, fn func(ctx context.Context, m *inventory.Machine) error) error {
	if concurrency < 1 {
		concurrency = 1
	}
	errs := make([]error, len(ms))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, m := range ms {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = fmt.Errorf("%s: not started: %w", m.Name, ctx.Err())
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			mctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if err := fn(mctx, m); err != nil {
				errs[i] = fmt.Errorf("%s: %w", m.Name, err)
			}
		}()
	}
	wg.Wait()
	var out *multierror.Error
	for _, err := range errs {
		if err != nil {
			out = multierror.Append(out, err)
		}
	}
	return out.ErrorOrNil()
}
