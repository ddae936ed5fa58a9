package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"devata.dev/devata/checks"
	"devata.dev/devata/config"

	"devata.dev/devata/internal/termsafe"
)

// Exit codes shared by the commands (DESIGN.md's CLI contract).
const (
	exitOK      = 0
	exitFailed  = 1 // invalid, drifted, actions pending, not converged
	exitTrouble = 2 // could not complete: an error or an unknown result
	// exitUsage is sysexits.h's EX_USAGE: the command line itself is wrong
	// (unknown command or flag, a bad flag value, arguments where none are
	// taken, flags that exclude each other), so nothing was tried. Kept apart
	// from 2 so that cron and CI can tell a broken job from a broken cluster.
	exitUsage = 64
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

// usageError marks err as a mistake in the command line (exit 64, with the
// pointer to --help): only for what the user typed, never for what devata
// found (a missing file, an unreachable machine, an invalid inventory).
func usageError(err error) error { return exitWith(exitUsage, err) }

// app is what every command shares: streams, resolved settings and a logger.
type app struct {
	streams  Streams
	getenv   func(string) string
	settings config.Settings
	log      *slog.Logger
	// checks is the check registry help text, --checks and completion
	// read; nil is checks.All (a test sets a copy with a check added).
	checks checks.Registry
}

// registry is the check registry the commands read.
func (a *app) registry() checks.Registry {
	if a.checks == nil {
		return checks.All()
	}
	return a.checks
}

// Run runs devata with args and returns the process exit code.
func Run(ctx context.Context, args []string, streams Streams) int {
	return run(ctx, args, streams, os.Getenv)
}

func run(ctx context.Context, args []string, streams Streams, getenv func(string) string) int {
	return runWith(ctx, args, streams, getenv, nil)
}

// runWith is run with the check registry reg (nil: checks.All).
func runWith(ctx context.Context, args []string, streams Streams, getenv func(string) string, reg checks.Registry) int {
	// text from machines, snapshots, lock files and inventories reaches the
	// terminal escaped (internal/termsafe); JSON escapes it anyway
	out, errw := termsafe.New(streams.Out), termsafe.New(streams.Err)
	defer errw.Flush() //nolint:errcheck // nowhere left to say it
	defer out.Flush()  //nolint:errcheck // idem
	streams.Out, streams.Err = out, errw
	a := &app{streams: streams, getenv: getenv, log: slog.New(newLineHandler(streams.Err, slog.LevelWarn)), checks: reg}
	root := a.newRootCommand()
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		ee = &exitError{code: exitTrouble, err: err}
	}
	if ee.err != nil {
		fmt.Fprintf(streams.Err, "error: %v\n", ee.err)
	}
	if ee.code == exitUsage && cmd != nil {
		fmt.Fprintf(streams.Err, "run '%s --help' for usage\n", cmd.CommandPath())
	}
	return ee.code
}

func (a *app) newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "devata",
		Short: "Keep bare-metal Talos Linux clusters equal to one declarative inventory",
		Long: `devata renders each machine's Talos config from one inventory file, applies it
over the Talos API, verifies the node layer and reports desired-vs-actual drift.

Start with:  devata demo          (runs on the embedded example; touches no machine)
             devata validate -i inventory.yaml

Exit 64 (EX_USAGE) for any command whose command line is wrong: an unknown
command or flag, a bad flag value, arguments where none are taken, flags that
exclude each other. Nothing was tried then. Each command's help gives its
other codes (2: it could not observe or complete).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// a bad value typed as a flag is the command line's fault
			// (64); the same value from DEVATA_* or the settings file is
			// the environment's (2, below)
			if err := config.CheckFlags(cmd.Flags()); err != nil {
				return usageError(err)
			}
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
		a.newUpgradeCommand(),
		a.newSimCommand(),
		a.newDemoCommand(),
		a.newReconcileCommand(),
		a.newBootstrapCommand(),
		a.newPlanCommand(),
		a.newBackupCommand(),
		a.newRemoveCommand(),
	)
	markUsageErrors(root)
	a.registerCompletions(root)
	helpShowsUsedFlags(root)
	return root
}

// markUsageErrors makes cobra's own complaints about the command line usage
// errors (exit 64): flags it cannot parse (unknown, or a value of the wrong
// type such as --timeout abc), arguments a command does not take, and an
// unknown subcommand. Cobra returns them as plain errors, which run would
// report as 2.
func markUsageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.HasSubCommands() && !c.Runnable():
			// cobra answers a group (devata gen) given an unknown
			// subcommand with its help and exit 0, and the root with a
			// plain error: both are usage errors
			c.Args = unknownSubcommand
			c.Run = func(c *cobra.Command, _ []string) { _ = c.Help() }
		case c.Args != nil:
			args := c.Args
			c.Args = func(c *cobra.Command, a []string) error {
				if err := args(c, a); err != nil {
					return usageError(err)
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// unknownSubcommand refuses any argument to a group command, naming the
// nearest subcommands as cobra does for the root.
func unknownSubcommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's own default, set only where it suggests
	}
	if near := c.SuggestionsFor(args[0]); len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return usageError(errors.New(msg))
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
	return slog.New(newLineHandler(w, level))
}
