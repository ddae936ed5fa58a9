package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/sim"
)

// slowPull is the installer pull of the tests below: long against the
// callers' short deadlines, short against their long ones.
const slowPull = 800 * time.Millisecond

// MachineService.Upgrade pulls the installer inside the call, under the
// caller's context (v1alpha1_server.go Upgrade, install/pull.go
// PullAndValidateInstallerImage), on every Talos that serves it: a caller
// whose deadline comes before the pull ends gets DeadlineExceeded at its
// deadline, and no upgrade starts, then or later, nor is the image kept;
// a caller who waits longer than the pull gets the ack. An installer
// already pulled is not pulled again (WithSkipIfAlreadyPulled).
func TestInstallerPullInsideUpgrade(t *testing.T) {
	t.Parallel()

	cp, wk := baseConfigs(t)

	for _, version := range []string{"v1.11.0", "v1.12.4", "v1.14.1"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()

			f := startWith(t, sim.Options{
				UpgradeDelay: time.Hour, // the sequence, once started, stays visible
				Machines: []sim.MachineSpec{
					{Name: "w-1", Config: wk, TalosVersion: version},
					{Name: "cp-1", Role: "controlplane", Config: cp, TalosVersion: version},
				},
			})
			image := factory1141
			if version != "v1.14.1" {
				image = ghcr1139
			}

			w := f.Machine("w-1")
			w.SetFaults(sim.Faults{InstallerPullDelay: slowPull})
			c := admin(t, w.Addr())

			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()

			began := time.Now()
			_, err := c.MachineClient.Upgrade(ctx, &machine.UpgradeRequest{Image: image})
			took := time.Since(began)

			if !cancelledPull(err, `error validating installer image "`+image+`": 1 error(s) occurred:`+"\n\ttimeout") || took >= slowPull {
				t.Fatalf("upgrade with a deadline before the pull ends: %v after %s; want DeadlineExceeded (or machined's timeout) at the deadline", err, took)
			}

			// the pull was cancelled: nothing starts once it would have ended
			time.Sleep(slowPull + 200*time.Millisecond)

			if obs := w.Observe(); obs.Upgrading || obs.NextVersion != "" || obs.Reboots != 0 || obs.TalosVersion != version {
				t.Fatalf("after the cancelled pull: %+v; want no upgrade, still %s", obs, version)
			}

			// nothing was kept: the next call pulls again, and a caller
			// who waits longer than the pull gets the ack
			began = time.Now()
			resp, err := c.MachineClient.Upgrade(ctxTimeout(t, 5*time.Second), &machine.UpgradeRequest{Image: image})
			took = time.Since(began)

			if err != nil || len(resp.GetMessages()) != 1 || resp.GetMessages()[0].GetAck() != "Upgrade request received" {
				t.Fatalf("upgrade with a deadline past the pull: %v, %v; want the ack", resp, err)
			}

			if took < slowPull {
				t.Errorf("the second upgrade call took %s; want the whole pull (%s) again: a cancelled pull keeps nothing", took, slowPull)
			}

			if !w.Observe().Upgrading {
				t.Errorf("after the ack: %+v; want the upgrade sequence running", w.Observe())
			}

			// a control plane without etcd: the pull, then the etcd checks
			// fail; the image stays pulled, so the second call does not
			// wait for it
			m := f.Machine("cp-1")
			m.SetFaults(sim.Faults{InstallerPullDelay: slowPull})
			cc := admin(t, m.Addr())

			for i, atLeast := range []bool{true, false} {
				began := time.Now()
				_, err := cc.MachineClient.Upgrade(ctxTimeout(t, 5*time.Second), &machine.UpgradeRequest{Image: image})
				took := time.Since(began)

				wantStatus(t, "control plane upgrade without etcd", err, codes.Unknown, "failed to create etcd client: no controlplane endpoints discovered yet")

				if atLeast != (took >= slowPull) {
					t.Errorf("control plane upgrade call %d took %s; want the pull (%s) the first time only", i+1, took, slowPull)
				}
			}
		})
	}
}

// ImageService.Pull (images.go Service.Pull, Talos 1.13 and 1.14) pulls
// under the stream's context and streams containerd's progress while it
// does (progress/pull_progress.go: downloading, every 100ms): a caller
// whose deadline comes first gets DeadlineExceeded, having seen the
// layers downloading, and nothing is stored, so LifecycleService.Upgrade
// does not find the installer; a caller who waits gets the layers'
// progress to the end and the image.
func TestInstallerPullInsideImagePull(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)

	for _, version := range []string{"v1.13.9", "v1.14.1"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()

			f := startWith(t, sim.Options{
				UpgradeDelay:       200 * time.Millisecond,
				InstallerPullDelay: slowPull,
				Machines:           []sim.MachineSpec{{Name: "w-1", Config: wk, TalosVersion: version}},
			})
			c := admin(t, f.Machine("w-1").Addr())

			ctx, cancel := context.WithTimeout(t.Context(), 350*time.Millisecond)
			defer cancel()

			// 1.13 retries, and go-retry's set says timeout; 1.14's
			// single attempt wraps the context's error, DeadlineExceeded
			machined := "1 error(s) occurred:\n\ttimeout"
			if version != "v1.13.9" {
				machined = ""
			}

			p, err := pullImage(ctx, c, nsSystem, factory1141)
			if !cancelledPull(err, machined) || p.name != "" {
				t.Fatalf("pull with a deadline before it ends: %+v, %v; want DeadlineExceeded", p, err)
			}

			if !downloading(p.progress) {
				t.Errorf("progress before the deadline: %v; want layers downloading, part way", p.progress)
			}

			_, err = lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1141)
			wantStatus(t, "lifecycle upgrade after the cancelled pull", err, codes.Internal,
				`upgrade failed: installer image "`+factory1141+`" not found in containerd store: image "`+factory1141+`": not found`)

			began := time.Now()
			p, err = pullImage(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1141)
			took := time.Since(began)

			if err != nil || p.name == "" || took < slowPull {
				t.Fatalf("pull with a deadline past it: %+v, %v after %s; want the image after the whole pull (%s)", p, err, took, slowPull)
			}

			// each layer's offset only grows while it downloads, and each
			// ends extracted
			offsets, done := map[string]int64{}, map[string]bool{}
			ticks := 0

			for _, pp := range p.progress {
				id, lp := pp.GetLayerId(), pp.GetProgress()

				switch lp.GetStatus() { //nolint:exhaustive
				case machine.ImageServicePullLayerProgress_DOWNLOADING:
					if lp.GetOffset() < offsets[id] || lp.GetOffset() > lp.GetTotal() {
						t.Errorf("layer %s downloading at %d after %d, of %d", id, lp.GetOffset(), offsets[id], lp.GetTotal())
					}

					offsets[id] = lp.GetOffset()
					ticks++
				case machine.ImageServicePullLayerProgress_EXTRACT_COMPLETE:
					done[id] = true
				}
			}

			if len(done) != 2 || len(offsets) != 2 || ticks < 2*3 {
				t.Errorf("progress: %d downloading messages over layers %v, extracted %v; want both layers reported several times, then extracted", ticks, offsets, done)
			}

			if up, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1141); err != nil || up.exit == nil || *up.exit != 0 {
				t.Errorf("lifecycle upgrade after the pull: %+v, %v; want exit code 0", up, err)
			}
		})
	}
}

// cancelledPull: err is what a caller whose deadline passed during a pull
// reads: its own client's DeadlineExceeded, or, when the reply won the
// race (the server's deadline is the caller's, sent as grpc-timeout),
// machined's own error, Unknown with message machined (none: no such
// reply).
func cancelledPull(err error, machined string) bool {
	st, _ := status.FromError(err)

	return err != nil && (st.Code() == codes.DeadlineExceeded || machined != "" && st.Code() == codes.Unknown && st.Message() == machined)
}

// downloading: some layer was reported part way through its download.
func downloading(progress []*machine.ImageServicePullProgress) bool {
	for _, pp := range progress {
		lp := pp.GetProgress()
		if lp.GetStatus() == machine.ImageServicePullLayerProgress_DOWNLOADING && lp.GetOffset() > 0 && lp.GetOffset() < lp.GetTotal() {
			return true
		}
	}

	return false
}
