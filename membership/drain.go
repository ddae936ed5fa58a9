package membership

import (
	"context"
	"errors"

	"devata.dev/devata/internal/drain"
)

// drainer is the shared drain (internal/drain) under the Remover's bounds.
func (r *Remover) drainer() *drain.Drainer {
	return &drain.Drainer{Kube: r.Kube, Timeout: r.Timeout, Wait: r.Wait, Poll: r.Poll, Say: r.Say, Heartbeat: r.Heartbeat}
}

// drain evicts the Node's pods (drain.Drainer.Drain): a pod a budget
// protects is retried until r.Wait, then the drain stops and nothing after
// it runs, the Node left cordoned. settle: the machine runs, so evicted
// pods are waited for until they are gone.
func (r *Remover) drain(ctx context.Context, node string, settle bool) error {
	_, err := r.drainer().Drain(ctx, node, settle)
	if blocked, ok := errors.AsType[*drain.BlockedError](err); ok {
		return errors.New(blocked.Error() + "; the Node stays cordoned")
	}
	return err
}

// unowned are the pods a drain would evict that no controller owns, as
// namespace/name.
func (r *Remover) unowned(ctx context.Context, node string) ([]string, error) {
	return r.drainer().Unowned(ctx, node)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
