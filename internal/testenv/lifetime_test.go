package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"devata.dev/devata/internal/testenv"
)

// lifetimeHelper, set in a test binary's environment, makes it start the
// control plane and wait to be killed (TestControlPlaneDiesWithItsParent).
const lifetimeHelper = "DEVATA_TESTENV_LIFETIME_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(lifetimeHelper) != "" {
		if _, _, err := testenv.RunWith(context.Background(), io.Discard, testenv.Options{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		time.Sleep(time.Hour) // until killed
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// A process killed while its kube-apiserver starts (SIGKILL: none of its
// cleanup runs) takes etcd and kube-apiserver with it: they do not stay
// behind as orphans holding ports, memory and CPU.
func TestControlPlaneDiesWithItsParent(t *testing.T) {
	ctx := t.Context()
	dir, err := testenv.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.Install(ctx, dir, io.Discard); err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), lifetimeHelper+"=1")
	helper.Stdout, helper.Stderr = io.Discard, io.Discard
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = helper.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = helper.Process.Kill()
		<-exited
		// the launch links of the killed helper, which had no time to remove them
		links, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("devata-testenv-launch-%d-*", helper.Process.Pid)))
		for _, l := range links {
			os.RemoveAll(l)
		}
	})

	// etcd starts first; kube-apiserver once etcd answers. Kill the helper
	// as soon as kube-apiserver runs (as itself: past the launch link).
	want := map[string]string{"etcd": filepath.Join(dir, "etcd"), "kube-apiserver": filepath.Join(dir, "kube-apiserver")}
	var found map[string]int
	deadline := time.Now().Add(3 * time.Minute)
	for {
		found = childrenRunning(helper.Process.Pid, want)
		if len(found) == len(want) {
			break
		}
		select {
		case <-exited:
			t.Fatalf("the helper ended before its control plane ran: %v", waitErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 minutes the helper runs %v of %v", found, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, pid := range found {
		for _, d := range tempDirsOf(pid) {
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited

	for name, pid := range found {
		gone := time.Now().Add(10 * time.Second)
		for alive(pid) {
			if time.Now().After(gone) {
				t.Errorf("%s (pid %d) still runs 10 s after its parent was killed", name, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// A start whose context ends meanwhile stops what it started and says why,
// instead of handing back a control plane nobody will stop.
func TestRunStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	env, stop, err := testenv.RunWith(ctx, io.Discard, testenv.Options{})
	if err == nil {
		_ = stop()
		t.Fatalf("RunWith with an ended context served %s", env.Config.Host)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunWith with an ended context: %v, want context.Canceled", err)
	}
}

// childrenRunning finds the children of ppid whose executable is one of
// want (name → path), by /proc: name → pid.
func childrenRunning(ppid int, want map[string]string) map[string]int {
	found := map[string]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(ppid) {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		for name, path := range want {
			if same(exe, path) {
				found[name] = pid
			}
		}
	}
	return found
}

func same(a, b string) bool {
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// alive says the process runs: not gone, and not a zombie (one that exited
// and waits for a reaper that may never come in a container).
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// tempDirsOf lists the envtest directories (data and certificates) a
// control-plane process was started with, for the test to remove.
func tempDirsOf(pid int) []string {
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil
	}
	var out []string
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		_, v, ok := strings.Cut(arg, "=")
		if ok && strings.HasPrefix(filepath.Base(v), "k8s_test_framework_") {
			out = append(out, v)
		}
	}
	return out
}
