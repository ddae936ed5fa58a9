package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
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

// lineHandler writes a log record as devata writes its other messages on
// stderr, "warning: msg (key=value …)", for --log-format text: devata's
// own log lines and the libraries' (through forward) read like the rest of
// the output instead of "time=… level=WARN msg=…" (issue 33). The
// attributes are formatted by slog's TextHandler (quoting, groups), without
// its time, level and message.
type lineHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	buf   *bytes.Buffer
	attrs slog.Handler // a TextHandler into buf
}

func newLineHandler(w io.Writer, level slog.Leveler) slog.Handler {
	buf := &bytes.Buffer{}
	drop := func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
			return slog.Attr{}
		}
		return a
	}
	return &lineHandler{w: w, mu: &sync.Mutex{}, buf: buf, attrs: slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level, ReplaceAttr: drop})}
}

func (h *lineHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.attrs.Enabled(ctx, l)
}

func (h *lineHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	if err := h.attrs.Handle(ctx, r); err != nil {
		return err
	}
	line := levelWord(r.Level) + ": " + r.Message
	if attrs := strings.TrimSpace(h.buf.String()); attrs != "" {
		line += " (" + attrs + ")"
	}
	_, err := io.WriteString(h.w, line+"\n")
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = h.attrs.WithAttrs(as)
	return &c
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.attrs = h.attrs.WithGroup(name)
	return &c
}

// levelWord is how devata's messages name a level: "warning: …" as the
// lines it prints itself.
func levelWord(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warning"
	case l >= slog.LevelInfo:
		return "info"
	}
	return "debug"
}
