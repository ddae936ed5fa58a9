package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"devata.dev/devata/config"
)

// Exit codes shared by the commands (DESIGN.md's CLI contract).
const (
	exitOK      = 0
	exitFailed  = 1 // invalid, drifted, actions pending, not converged
	exitTrouble = 2 // could not complete: an error or an unknown result
)

// Streams are the process's standard streams; tests pass buffers.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// exitError carries a command's exit code. A nil err means the command already
// said everything it had to say.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func exitWith(code int, err error) error { return &exitError{code: code, err: err} }

// app is what every command shares: streams, resolved settings and a logger.
type app struct {
	streams  Streams
	getenv   func(string) string
	settings config.Settings
	log      *slog.Logger
}

// Run runs devata with args and returns the process exit code.
func Run(ctx context.Context, args []string, streams Streams) int {
	return run(ctx, args, streams, os.Getenv)
}

func run(ctx context.Context, args []string, streams Streams, getenv func(string) string) int {
	a := &app{streams: streams, getenv: getenv, log: slog.New(slog.NewTextHandler(streams.Err, nil))}
	root := a.newRootCommand()
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(streams.Err, "error: %v\n", ee.err)
		}
		return ee.code
	}
	fmt.Fprintf(streams.Err, "error: %v\n", err)
	return exitTrouble
}

func (a *app) newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "devata",
		Short: "Keep bare-metal Talos Linux clusters equal to one declarative inventory",
		Long: `devata renders each machine's Talos config from one inventory file, applies it
over the Talos API, verifies the node layer and reports desired-vs-actual drift.

Start with:  devata demo          (runs on the embedded example; touches no machine)
             devata validate -i inventory.yaml`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			s, err := config.Load(cmd.Flags(), a.getenv)
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			a.settings = s
			a.log = newLogger(a.streams.Err, s)
			routeLibraryLogs(a.log)
			return nil
		},
	}
	config.RegisterFlags(root.PersistentFlags())
	root.AddCommand(
		a.newValidateCommand(),
		a.newGenCommand(),
		a.newVersionCommand(),
		a.newDriftCommand(),
		a.newApplyCommand(),
		a.newSimCommand(),
		a.newDemoCommand(),
		a.newReconcileCommand(),
		a.newBootstrapCommand(),
		a.newPlanCommand(),
	)
	return root
}

func newLogger(w io.Writer, s config.Settings) *slog.Logger {
	level := slog.LevelWarn
	switch {
	case s.Verbose >= 2:
		level = slog.LevelDebug
	case s.Verbose == 1:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if s.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
