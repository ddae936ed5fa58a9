package sim

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The installer pull takes time (Options.InstallerPullDelay,
// Faults.InstallerPullDelay), and it takes it under the caller's context,
// as Talos pulls it:
//
//   - MachineService.Upgrade (v1alpha1_server.go Upgrade, in v1.11.0,
//     v1.13.9 and v1.14.1) calls install.PullAndValidateInstallerImage
//     (internal/pkg/install/pull.go) with the request's context before it
//     replies: image.Pull (1.11 to 1.13; 1.14 PullWithRetriesAndTimeout)
//     fetches and unpacks the image through containerd's client.Pull, then
//     runs `/bin/installer --help` in it. Only once that is done do the
//     etcd checks run and the upgrade sequence start. When the caller's
//     deadline passes first, client.Pull fails with the context's error,
//     go-retry (retry.go retry) turns it into its TimeoutError and stops
//     retrying, and the handler returns "error validating installer image
//     %q: 1 error(s) occurred:\n\ttimeout": no sequence runs. gRPC's
//     server answers that plain error as Unknown. The caller's client
//     mostly reports its own DeadlineExceeded ("context deadline
//     exceeded"), but the server's deadline is the caller's (sent as
//     grpc-timeout, truncated), so machined's Unknown can win the race:
//     a caller must tell a pull cut short by its own deadline by that
//     deadline, not by the code.
//   - ImageService.Pull (internal/app/images/images.go Service.Pull,
//     v1.13.9 and v1.14.1) pulls under the stream's context, and sends
//     containerd's progress meanwhile (progress/pull_progress.go
//     ShowProgress: every 100ms, a DOWNLOADING message per layer being
//     fetched, its offset and total). Cancelled, nothing is stored: 1.13's
//     image.Pull retries and returns go-retry's "1 error(s)
//     occurred:\n\ttimeout" (Unknown); 1.14's single attempt
//     (pull.go Pull, pullInternal) returns "failed to pull image %q: …"
//     around the context's error, which gRPC answers DeadlineExceeded.
//     The caller, again, mostly sees its own DeadlineExceeded first.
//
// What the sim does not model: containerd keeps the layers a cancelled
// pull completed in its content store (until its garbage collector runs),
// so on Talos a second attempt may be shorter; in the sim every attempt
// takes the whole delay.

// pullTick is how often containerd's pull progress is reported
// (progress/pull_progress.go ShowProgress: a 100ms ticker).
const pullTick = 100 * time.Millisecond

// installerPullDelay is how long an installer pull takes on the machine
// with faults f.
func (f *Fleet) installerPullDelay(faults Faults) time.Duration {
	if faults.InstallerPullDelay > 0 {
		return faults.InstallerPullDelay
	}

	return f.pullDelay
}

// download waits out a pull that takes d, as containerd's client.Pull
// fetches and unpacks an image under ctx: every pullTick it reports the
// share done so far through progress (when not nil); when ctx ends first
// it returns ctx's error, and the caller stores nothing.
func download(ctx context.Context, d time.Duration, progress func(done float64) error) error {
	if d <= 0 {
		return nil
	}

	start := time.Now()

	end := time.NewTimer(d)
	defer end.Stop()

	tick := time.NewTicker(pullTick)
	defer tick.Stop()

	for {
		select {
		case <-end.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if progress == nil {
				continue
			}

			if err := progress(min(float64(time.Since(start))/float64(d), 1)); err != nil {
				return err
			}
		}
	}
}

// retriedPullError is image.Pull's error when its context ended during a
// pull inside go-retry's loop (retry.go retry): past the deadline its
// TimeoutError alone; cancelled, the attempt's error and the context's,
// in an error set that still wraps context.Canceled (ErrorSet.Is), which
// gRPC answers Canceled.
func retriedPullError(ref imageRef, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errors.New("1 error(s) occurred:\n\ttimeout")
	}

	return fmt.Errorf("2 error(s) occurred:\n\tfailed to pull image %q: %w\n\t%w", ref, err, err)
}
