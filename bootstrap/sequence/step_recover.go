package sequence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
)

// snapshotMembersRunning are the control planes whose etcd reports a
// member ID the snapshot holds: the cluster it was taken of still runs.
// A restore gives every member a new ID (etcdutl's restore makes a new
// cluster), so a recovered cluster shares none.
func (s *Sequence) snapshotMembersRunning() []string {
	old := map[uint64]bool{}
	for _, m := range s.opts.Recover.Members {
		old[m.ID] = true
	}
	var out []string
	for _, cp := range s.inv.ControlPlanes() {
		o := s.st.obs[cp.Name]
		if o == nil {
			continue
		}
		if o.EtcdLocal != nil && old[o.EtcdLocal.MemberID] && !slices.Contains(out, cp.Name) {
			out = append(out, cp.Name) // its own status says so, leader or not
		}
		if o.Etcd == nil {
			continue
		}
		for name, id := range o.Etcd.IDs {
			if old[id] && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// recoverFirst rebuilds etcd on m from the snapshot, as talosctl
// bootstrap --recover-from does: EtcdRecover uploads it (Talos refuses
// with FailedPrecondition until /var is mounted after a boot: retried),
// Bootstrap with recover_etcd starts etcd on it, and etcd's service
// restores it as it starts, after the call replied: the step waits until
// etcd runs on m, or its service failed (a snapshot etcd refused).
func (s *Sequence) recoverFirst(ctx context.Context, m *inventory.Machine, why string) (string, error) {
	snap := s.opts.Recover
	s.say("    %s: recovering etcd on %s, the first control plane by name, from %s (revision %d, %d members when taken)", why, m.Name, snap.Path, snap.Revision, len(snap.Members))
	deadline := time.Now().Add(s.opts.Wait)
	for {
		err := s.upload(ctx, m)
		if err == nil {
			break
		}
		if client.StatusCode(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			return "", fmt.Errorf("upload %s to %s: %w", snap.Path, m.Name, err)
		}
		s.say("    %s: %v: not ready for it yet, trying again", m.Name, err)
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return "", err
		}
	}
	s.say("    %s: snapshot uploaded (%d bytes); bootstrapping with recover_etcd", m.Name, snap.Size)
	bctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	c, err := s.dialer.Client(bctx, m)
	if err == nil {
		err = c.Bootstrap(bctx, &machine.BootstrapRequest{RecoverEtcd: true})
		c.Close()
	}
	cancel()
	switch client.StatusCode(err) {
	case codes.OK:
	case codes.AlreadyExists:
		return m.Name + " already holds etcd data (AlreadyExists): treated as recovered", nil
	default:
		return "", fmt.Errorf("bootstrap %s with recover_etcd: %w", m.Name, err)
	}
	return s.waitRecovered(ctx, m)
}

// upload streams the snapshot file to m's EtcdRecover. The file is the
// one verified before anything was sent only if it still is: it is opened
// again here, so what is read is held to the verified size and appended
// hash on the way (a file swapped since, for another cluster's, is caught
// before Bootstrap asks Talos to restore it).
func (s *Sequence) upload(ctx context.Context, m *inventory.Machine) error {
	snap := s.opts.Recover
	f, err := os.Open(snap.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	uctx, cancel := context.WithTimeout(ctx, s.opts.Wait)
	defer cancel()
	c, err := s.dialer.Client(uctx, m)
	if err != nil {
		return fmt.Errorf("dial %s: %w", m.Name, err)
	}
	defer c.Close()
	tail := &lastBytes{keep: sha256.Size}
	if _, err = c.EtcdRecover(uctx, io.TeeReader(f, tail)); err != nil {
		return err
	}
	if tail.n != snap.Size || hex.EncodeToString(tail.buf) != snap.SHA256 {
		return fmt.Errorf("%s changed after it was verified (%d bytes now, %d then): not restoring it; run the command again to verify it anew", snap.Path, tail.n, snap.Size)
	}
	return nil
}

// lastBytes keeps the last keep bytes written to it, and counts them all.
type lastBytes struct {
	keep int
	buf  []byte
	n    int64
}

func (l *lastBytes) Write(p []byte) (int, error) {
	l.n += int64(len(p))
	l.buf = append(l.buf, p...)
	if len(l.buf) > l.keep {
		l.buf = append(l.buf[:0], l.buf[len(l.buf)-l.keep:]...)
	}
	return len(p), nil
}

// waitRecovered waits until etcd runs on m with the restored data, or its
// service failed.
func (s *Sequence) waitRecovered(ctx context.Context, m *inventory.Machine) (string, error) {
	beat := heartbeat.Start(s.say, 0, s.opts.Wait, "etcd on "+m.Name+" to restore the snapshot and start")
	defer beat.Stop()
	wctx, cancel := context.WithTimeout(ctx, s.opts.Wait)
	defer cancel()
	for {
		octx, ocancel := context.WithTimeout(wctx, s.opts.Timeout)
		o := machines.Observe(octx, s.dialer, m)
		ocancel()
		switch {
		case o != nil && o.Etcd != nil && slices.Contains(o.Etcd.Members, m.Name):
			return fmt.Sprintf("recovered etcd on %s from %s", m.Name, s.opts.Recover.Path), nil
		case o != nil && o.EtcdService != nil && o.EtcdService.State == "Failed":
			return "", fmt.Errorf("%s: etcd did not restore %s: %s; the snapshot is left as it was: check it (devata backup etcd writes verified ones), then run bootstrap --recover-from again", m.Name, s.opts.Recover.Path, o.EtcdService.Event)
		case o != nil && o.EtcdService != nil:
			beat.Saw("etcd service " + o.EtcdService.State)
		}
		if err := sleep(wctx, s.opts.Poll); err != nil {
			return "", fmt.Errorf("etcd on %s did not start from the snapshot within %s", m.Name, s.opts.Wait)
		}
	}
}
