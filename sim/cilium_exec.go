package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// runInAgent runs a command in the machine's cilium-agent container and
// returns its exit code: cilium-dbg directly, or a `sh -c` script through a
// POSIX shell interpreter whose only programs are cilium-dbg and the shell's
// builtins (echo, true, …); files other than /dev/null cannot be opened.
func (f *Fleet) runInAgent(ctx context.Context, m *Machine, cmd []string, in io.Reader, out, errw io.Writer) int {
	if len(cmd) == 0 {
		fmt.Fprintln(errw, "no command")
		return 126
	}

	switch path.Base(cmd[0]) {
	case "sh", "bash":
		if len(cmd) < 3 || cmd[1] != "-c" {
			fmt.Fprintln(errw, "sh: the simulated agent container takes only sh -c SCRIPT")
			return 2
		}

		return f.runScript(ctx, m, cmd[2], in, out, errw)
	case "cilium-dbg", "cilium":
		return f.ciliumDbg(ctx, m, cmd[1:], out, errw)
	}

	fmt.Fprintf(errw, "exec: %q: executable file not found in $PATH\n", cmd[0])

	return 127
}

func (f *Fleet) runScript(ctx context.Context, m *Machine, script string, in io.Reader, out, errw io.Writer) int {
	file, err := syntax.NewParser().Parse(strings.NewReader(script), "sh")
	if err != nil {
		fmt.Fprintln(errw, err)
		return 2
	}

	r, err := interp.New(
		interp.StdIO(in, out, errw),
		interp.Env(nil),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc {
			return func(ctx context.Context, args []string) error {
				hc := interp.HandlerCtx(ctx)
				if code := f.runInAgent(ctx, m, args, hc.Stdin, hc.Stdout, hc.Stderr); code != 0 {
					return interp.ExitStatus(min(code, 255))
				}

				return nil
			}
		}),
		interp.OpenHandler(func(ctx context.Context, p string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
			if p == "/dev/null" {
				return devNull{}, nil
			}

			return nil, &os.PathError{Op: "open", Path: p, Err: os.ErrPermission}
		}),
	)
	if err != nil {
		fmt.Fprintln(errw, err)
		return 2
	}

	err = r.Run(ctx, file)

	var status interp.ExitStatus

	switch {
	case err == nil:
		return 0
	case errors.As(err, &status):
		return int(status)
	}

	fmt.Fprintln(errw, err)

	return 1
}

type devNull struct{}

func (devNull) Read([]byte) (int, error)    { return 0, io.EOF }
func (devNull) Write(p []byte) (int, error) { return len(p), nil }
func (devNull) Close() error                { return nil }
