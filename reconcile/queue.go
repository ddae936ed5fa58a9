package reconcile

import (
	"time"

	"k8s.io/client-go/util/workqueue"
)

// queueName labels the work queue's metrics.
const queueName = "devata"

// newQueue is the loop's work queue: keyed by machine name, so a machine is
// never handled by two workers at once (client-go keeps a key out of Get while
// it is processing and folds re-adds into one), with a per-machine exponential
// backoff between base and max for keys re-added after a failure.
func newQueue(base, max time.Duration, m *Metrics) workqueue.TypedRateLimitingInterface[string] {
	var rl workqueue.TypedRateLimiter[string] = workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, max)
	cfg := workqueue.TypedRateLimitingQueueConfig[string]{Name: queueName}
	if m != nil {
		rl = &observedLimiter{inner: rl, m: m}
		cfg.MetricsProvider = m.queue
	}
	return workqueue.NewTypedRateLimitingQueueWithConfig(rl, cfg)
}

// observedLimiter publishes each machine's backoff as it is decided, so that
// a machine that keeps failing is visible in metrics and not only in logs.
type observedLimiter struct {
	inner workqueue.TypedRateLimiter[string]
	m     *Metrics
}

func (o *observedLimiter) When(key string) time.Duration {
	d := o.inner.When(key)
	o.m.backoff.WithLabelValues(key).Set(d.Seconds())
	o.m.failures.WithLabelValues(key).Set(float64(o.inner.NumRequeues(key)))
	return d
}

func (o *observedLimiter) Forget(key string) {
	o.inner.Forget(key)
	o.m.backoff.WithLabelValues(key).Set(0)
	o.m.failures.WithLabelValues(key).Set(0)
}

func (o *observedLimiter) NumRequeues(key string) int { return o.inner.NumRequeues(key) }
