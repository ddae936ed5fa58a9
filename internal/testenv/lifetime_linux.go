package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// etcd and kube-apiserver must not outlive the process that started them
// (devata sim, the demo, a test binary), however it ends: envtest starts
// them in process groups of their own (Setpgid), so a Ctrl-C on the
// terminal does not reach them, and a parent killed during their start (or
// by SIGKILL at any time) runs none of its cleanup. envtest offers no hook
// into its exec.Cmd, so each binary is started through a launch link: a
// symlink to this very executable in a directory named for the parent's
// pid, next to a link to the real binary. The launched copy of this
// executable sees, in its init, that it was started as such a link, asks
// the kernel for SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG,
// which survives execve), and becomes the real binary. envtest's flag
// probe (`--help`) goes through the same link.

// launchPrefix names a launch directory: launchPrefix<parent pid>-<random>.
const launchPrefix = "devata-testenv-launch-"

// realSuffix marks the link to the real binary beside its launch link.
const realSuffix = ".real"

func init() { execLaunched() }

// execLaunched turns this process into the real binary when it was started
// through a launch link, bound to its parent's life; otherwise it returns.
// It runs in init, on the main thread (the runtime locks the main goroutine
// to it while packages initialize): the parent-death signal belongs to the
// thread that sets it, and that thread is the one execve keeps.
func execLaunched() {
	dir, name := filepath.Split(os.Args[0])
	base := filepath.Base(dir)
	if name == "" || !strings.HasPrefix(base, launchPrefix) {
		return
	}
	pid, _, _ := strings.Cut(strings.TrimPrefix(base, launchPrefix), "-")
	parent, err := strconv.Atoi(pid)
	if err != nil {
		return // not a launch directory of ours
	}
	real := filepath.Join(dir, name+realSuffix)
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "testenv launch %s: prctl(PR_SET_PDEATHSIG): %v\n", name, errno)
		os.Exit(127)
	}
	// The parent may have died between the fork and the prctl: then no
	// signal will come, and nobody waits for this process.
	if os.Getppid() != parent {
		os.Exit(1)
	}
	if target, err := filepath.EvalSymlinks(real); err == nil {
		real = target
	}
	err = syscall.Exec(real, append([]string{real}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "testenv launch %s: exec %s: %v\n", name, real, err)
	os.Exit(127)
}

// launchDir makes a launch directory for the binaries at paths and returns
// the path to start each through (in the same order) and a function that
// removes the directory. Without a known executable of its own the process
// starts the binaries directly (they may then outlive it).
func launchDir(paths ...string) ([]string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return paths, func() {}, nil
	}
	dir, err := os.MkdirTemp("", launchPrefix+strconv.Itoa(os.Getpid())+"-*")
	if err != nil {
		return nil, nil, fmt.Errorf("launch directory: %w", err)
	}
	remove := func() { os.RemoveAll(dir) }
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		link := filepath.Join(dir, filepath.Base(p))
		if err := os.Symlink(self, link); err != nil {
			remove()
			return nil, nil, fmt.Errorf("launch link: %w", err)
		}
		if err := os.Symlink(p, link+realSuffix); err != nil {
			remove()
			return nil, nil, fmt.Errorf("launch link: %w", err)
		}
		out = append(out, link)
	}
	return out, remove, nil
}
