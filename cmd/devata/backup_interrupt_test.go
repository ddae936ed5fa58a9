package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
)

// holdingProxy is a TCP relay in front of the real S3 server that stops
// relaying a connection's request once its bytes match hold (the request
// line of one PUT), and says so on held: the upload is then in the middle
// of its request, as a process signalled at that moment would leave it.
type holdingProxy struct {
	addr string
	held chan struct{}
}

func startHoldingProxy(t *testing.T, upstream string, hold *regexp.Regexp) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{addr: ln.Addr().String(), held: make(chan struct{})}
	var once sync.Once
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(c, up); c.Close() }() //nolint:errcheck // a relay
			go func() {
				defer wg.Done()
				defer up.Close()
				var seen bytes.Buffer
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						seen.Write(buf[:n])
						if hold.Match(seen.Bytes()) {
							once.Do(func() { close(p.held) })
							io.Copy(io.Discard, c) //nolint:errcheck // held: nothing more goes up
							return
						}
						if seen.Len() > 1<<20 {
							seen.Reset()
						}
						if _, err := up.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// backup etcd --to s3://…/ signalled in the middle of its upload (issue
// 34, leftover a): the command's context ends as SIGTERM ends it
// (main.go's signal.NotifyContext), once while the snapshot's PUT is in
// flight and once while its sidecar's is. Each run exits 2, and afterwards
// no new snapshot is listed or picked as latest (verify --latest proves
// the one from before), nothing of the run is left at the prefix that a
// list or latest would pick, and no private copy stays behind.
func TestBackupS3InterruptedUpload(t *testing.T) {
	srv := testenv.StartS3(t)
	sf := startSim(t, simtest.Options{Bootstrap: true})
	s3Env(t, srv)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	url := "s3://" + srv.Bucket + "/homelab/"
	if r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", url); r.code != 0 {
		t.Fatalf("the first backup: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	first := listDir(t, sf, url)
	if len(first.Snapshots) != 1 {
		t.Fatalf("list after one backup: %+v", first)
	}
	upstream := strings.TrimPrefix(srv.Endpoint, "http://")
	for phase, hold := range map[string]*regexp.Regexp{
		"snapshot": regexp.MustCompile(`PUT /` + srv.Bucket + `/homelab/etcd-homelab-[0-9T.]+Z\.db[ ?]`),
		"sidecar":  regexp.MustCompile(`PUT /` + srv.Bucket + `/homelab/etcd-homelab-[0-9T.]+Z\.db\.json[ ?]`),
	} {
		t.Run(phase, func(t *testing.T) {
			p := startHoldingProxy(t, upstream, hold)
			t.Setenv("XDG_CONFIG_HOME", t.TempDir())
			env := map[string]string{}
			os.Setenv("AWS_ENDPOINT_URL_S3", "http://"+p.addr) //nolint:usetesting // restored below; devata reads the process' environment
			defer os.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan result, 1)
			go func() {
				var out, errb bytes.Buffer
				code := run(ctx, []string{"backup", "etcd", "--config", sf.settings, "--to", url}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(k string) string { return env[k] })
				done <- result{code, out.String(), errb.String()}
			}()
			var r result
			select {
			case <-p.held:
				cancel() // SIGTERM, as main.go's NotifyContext delivers it
				r = <-done
			case r = <-done:
				t.Fatalf("the backup ended before its %s upload was held: exit %d\n%s%s", phase, r.code, r.stdout, r.err)
			}
			show(t, r)
			if r.code != 2 {
				t.Errorf("interrupted during the %s upload: exit %d, want 2\n%s%s", phase, r.code, r.stdout, r.err)
			}
			os.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint) //nolint:usetesting // the real endpoint again
			l := listDir(t, sf, url)
			if len(l.Snapshots) != 1 || l.Snapshots[0].Name != first.Snapshots[0].Name {
				t.Errorf("after the interrupted run, list shows %+v; want only %s", l.Snapshots, first.Snapshots[0].Name)
			}
			v := devata(t, nil, "backup", "verify", "--config", sf.settings, "--latest", url, "-o", "json")
			if !strings.Contains(v.stdout+v.err, first.Snapshots[0].Name) {
				t.Errorf("verify --latest after the interrupted run did not pick %s:\n%s%s", first.Snapshots[0].Name, v.stdout, v.err)
			}
			// what a latest could pick: any devata-named snapshot object
			entries, _ := os.ReadDir(srv.Dir + "/" + srv.Bucket + "/homelab")
			var names []string
			for _, e := range entries {
				if !strings.HasPrefix(e.Name(), ".") {
					names = append(names, e.Name())
				}
			}
			if len(names) != 2 {
				t.Errorf("the prefix holds %v after the interrupted run; want only %s and its sidecar", names, first.Snapshots[0].Name)
			}
			// the run has returned: its private copy (devata-backup-*) is gone
			// (the test's own temporary directories live there too)
			entries, _ = os.ReadDir(tmp)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "devata-") {
					t.Errorf("the private copy stays behind: %s", e.Name())
				}
			}
		})
	}
}
