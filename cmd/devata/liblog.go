package main

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Libraries that log on their own, controller-runtime (envtest, in demo
// and sim) and client-go (klog: leader election, reflectors), log through
// devata's logger: with its level, its format (--log-format json gives
// them structured lines), to its stream. Without it controller-runtime
// prints a stack trace ("log.SetLogger(...) was never called") 30 s after
// its first use (pkg/log/log.go eventuallyFulfillRoot).
//
// controller-runtime takes its logger once per process, and klog's may only
// be set before anything logs (klog.SetLoggerWithOptions: it is not
// synchronised), so both get one forwarding handler at init, before any
// goroutine runs, and each run points it at its own logger.
var libLogger atomic.Pointer[slog.Logger]

func init() {
	libLogger.Store(slog.New(slog.DiscardHandler))
	fwd := slog.New(forward{})
	ctrllog.SetLogger(logr.FromSlogHandler(fwd.Handler()))
	klog.SetSlogLogger(fwd)
}

// routeLibraryLogs sends the libraries' logs to l from now on.
func routeLibraryLogs(l *slog.Logger) { libLogger.Store(l) }

// forward hands each record to the logger of the current run, with the
// attributes and groups added on the way, in their order.
type forward struct {
	with []func(slog.Handler) slog.Handler
}

func (f forward) target() slog.Handler {
	h := libLogger.Load().Handler()
	for _, w := range f.with {
		h = w(h)
	}
	return h
}

func (f forward) Enabled(ctx context.Context, l slog.Level) bool { return f.target().Enabled(ctx, l) }

func (f forward) Handle(ctx context.Context, r slog.Record) error { return f.target().Handle(ctx, r) }

func (f forward) WithAttrs(as []slog.Attr) slog.Handler {
	return f.and(func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })
}

func (f forward) WithGroup(name string) slog.Handler {
	return f.and(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}

func (f forward) and(w func(slog.Handler) slog.Handler) forward {
	f.with = append(f.with[:len(f.with):len(f.with)], w)
	return f
}
