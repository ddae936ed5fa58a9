package backup

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	p := &byteProgress{w: &buf, machine: "cp-1", every: 2 * time.Second, now: func() time.Time { return now }}
	for i := range 10 {
		now = now.Add(time.Second)
		p.update(int64(i+1) << 20)
	}
	if n := strings.Count(buf.String(), "\n"); n != 4 || !strings.Contains(buf.String(), "etcd snapshot from cp-1: 3.0 MiB received (1.5 MiB/s)") {
		t.Errorf("progress:\n%s", buf.String())
	}
}

// A stream that stops sending is cancelled after --timeout without a byte,
// however long the snapshot has been streaming.
func TestStreamStalls(t *testing.T) {
	stalled := make(chan error, 1)
	w := &streamWatch{w: io.Discard, idle: time.Second, machine: "cp-1", cancel: func(err error) { stalled <- err }}
	w.start()
	defer w.stop()
	for range 4 {
		time.Sleep(10 * time.Millisecond)
		if _, err := w.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-stalled:
		t.Fatalf("cancelled while bytes came: %v", err)
	default:
	}
	select {
	case err := <-stalled:
		if !errors.Is(err, errStalled) || !strings.Contains(err.Error(), "no data from cp-1 for 1s") {
			t.Errorf("stall: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stalled stream was not cancelled")
	}
}

// A stream that sends more than any etcd snapshot is stopped: one that
// never ends would fill the disk.
func TestStreamTooLarge(t *testing.T) {
	var cause error
	w := &streamWatch{w: io.Discard, idle: time.Minute, max: 10, machine: "cp-1", cancel: func(err error) { cause = err }}
	w.start()
	defer w.stop()
	if _, err := w.Write(make([]byte, 10)); err != nil || cause != nil {
		t.Fatalf("10 bytes of at most 10: %v, %v", err, cause)
	}
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cause, errTooLarge) || !strings.Contains(cause.Error(), "more than 10 B from cp-1") {
		t.Errorf("the 11th byte: %v", cause)
	}
}
