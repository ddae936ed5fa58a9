package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// controller-runtime's and client-go's own log lines go through devata's
// logger, in its format, to its stream: without it controller-runtime
// prints a stack trace 30 s into demo or sim (issue 17), and client-go's
// leader election logs unstructured lines (issue 18).
func TestLibraryLogsGoThroughDevatasLogger(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"version", "--log-format", "json"}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" })
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	ctrllog.Log.WithName("envtest").Error(nil, "controller-runtime probe", "k", "v")
	klog.ErrorS(nil, "klog probe", "lease", "devata-reconcile")
	klog.Flush()
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	for _, want := range []string{"controller-runtime probe", "klog probe"} {
		found := false
		for _, line := range lines {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == want {
				found = true
			}
		}
		if !found {
			t.Errorf("no JSON line with msg %q on devata's stderr:\n%s", want, errb.String())
		}
	}
}

// With --log-format text, log lines, devata's own and the libraries', read
// as devata's other messages ("warning: …"), not as slog's "time=…
// level=WARN msg=…" mixed into formatted output (issue 33).
func TestTextLogLinesReadAsDevatasMessages(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"version"}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" })
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	ctrllog.Log.WithName("envtest").Error(nil, "controller-runtime probe", "k", "two words")
	klog.ErrorS(nil, "klog probe", "lease", "devata-reconcile")
	klog.Flush()
	libLogger.Load().Warn("devata probe", "machine", "cp-1")
	libLogger.Load().Info("hidden below -v")
	got := errb.String()
	for _, want := range []string{
		`error: controller-runtime probe (logger=envtest k="two words")`,
		"error: klog probe (lease=devata-reconcile)",
		"warning: devata probe (machine=cp-1)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stderr lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"time=", "level=", "msg=", "hidden below -v"} {
		if strings.Contains(got, bad) {
			t.Errorf("stderr holds %q:\n%s", bad, got)
		}
	}
}
