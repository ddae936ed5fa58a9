package bootstrap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
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
	s.say("    %s: recovering etcd on %s, the first control plane by name, from %s (revision %d, %d members when taken)", why, m.Name, s.recoverFrom(), snap.Revision, len(snap.Members))
	deadline := time.Now().Add(s.opts.Wait)
	for {
		err := s.upload(ctx, m)
		if err == nil {
			break
		}
		if client.StatusCode(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			return "", fmt.Errorf("upload %s to %s: %w", s.recoverFrom(), m.Name, err)
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
		return s.alreadyRecovered(ctx, m)
	default:
		return "", fmt.Errorf("bootstrap %s with recover_etcd: %w", m.Name, err)
	}
	return s.waitRecovered(ctx, m)
}

// alreadyRecovered reads a Bootstrap that answered AlreadyExists: the
// data directory is not empty, which a recovery that already happened
// explains only when the evidence says so: etcd runs on m with m among
// its members, every member a control plane of the inventory, and none
// with a member ID the snapshot holds (a restore gives new ones). Anything
// else (what a failed restore left, another cluster's data) is not a
// recovery, and the way on is a wipe of m's EPHEMERAL partition.
func (s *Sequence) alreadyRecovered(ctx context.Context, m *inventory.Machine) (string, error) {
	octx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	o := talosapi.Observe(octx, s.dialer, m)
	cancel()
	old := map[uint64]bool{}
	for _, mem := range s.opts.Recover.Members {
		old[mem.ID] = true
	}
	var seen string
	switch {
	case o == nil || o.Err != nil:
		seen = "it could not be observed afterwards"
		if o != nil {
			seen += ": " + o.Err.Error()
		}
	case o.Etcd != nil && slices.Contains(o.Etcd.Members, m.Name):
		var foreign []string
		for name, id := range o.Etcd.IDs {
			if old[id] || s.inv.Machine(name) == nil || !s.inv.Machine(name).IsControlPlane() {
				foreign = append(foreign, name)
			}
		}
		if len(foreign) == 0 {
			return fmt.Sprintf("%s already holds etcd data (AlreadyExists) and runs etcd with members [%s], all control planes of this inventory with new member IDs: recovered before", m.Name, strings.Join(o.Etcd.Members, " ")), nil
		}
		slices.Sort(foreign)
		seen = fmt.Sprintf("its etcd runs with members [%s], but %s %s not a restored member of this inventory's cluster", strings.Join(o.Etcd.Members, " "), strings.Join(foreign, ", "), isAre(len(foreign)))
	case o.EtcdService != nil:
		seen = fmt.Sprintf("its etcd service is %s (%s)", o.EtcdService.State, o.EtcdService.Event)
	default:
		seen = "its etcd does not answer: " + fmt.Sprint(o.EtcdErr)
	}
	return "", fmt.Errorf("%s answered the recovery's Bootstrap with AlreadyExists: its etcd data directory is not empty, yet %s: that is not a recovery from %s (what a failed restore wrote, or another cluster's data). Wipe its EPHEMERAL partition, which keeps its config (devata has no command for this; devata remove would wipe the whole disk): %s; once it is back, run devata bootstrap --recover-from %s again",
		m.Name, seen, s.recoverFrom(), wipeCommand(m), s.recoverFrom())
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
		return fmt.Errorf("%s changed after it was verified (%d bytes now, %d then): not restoring it; run the command again to verify it anew", s.recoverFrom(), tail.n, snap.Size)
	}
	return nil
}

// recoverFrom names the snapshot as the user did (Options.RecoverFrom).
func (s *Sequence) recoverFrom() string {
	if s.opts.RecoverFrom != "" {
		return s.opts.RecoverFrom
	}
	return s.opts.Recover.Path
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
		o := talosapi.Observe(octx, s.dialer, m)
		ocancel()
		switch {
		case o != nil && o.Etcd != nil && slices.Contains(o.Etcd.Members, m.Name):
			return fmt.Sprintf("recovered etcd on %s from %s", m.Name, s.recoverFrom()), nil
		case o != nil && o.EtcdService != nil && o.EtcdService.State == "Failed":
			return "", s.recoveryFailed(m, o.EtcdService)
		case o != nil && o.EtcdService != nil:
			beat.Saw("etcd service " + o.EtcdService.State)
		}
		if err := sleep(wctx, s.opts.Poll); err != nil {
			return "", fmt.Errorf("etcd on %s did not start from the snapshot within %s", m.Name, s.opts.Wait)
		}
	}
}

// recoveryFailed is the error of a recovery whose etcd service failed: it
// is never "recovered". What to do next depends on what the failure left
// (failedFact): a snapshot Talos could not read wrote nothing, and a
// rerun is enough; any other failure may have written the data
// directory (etcdutl writes the database before it checks the hash), and
// only a wipe of EPHEMERAL clears it.
func (s *Sequence) recoveryFailed(m *inventory.Machine, svc *talosapi.EtcdService) error {
	path := s.recoverFrom()
	if f := failedFact(svc); f != nil && f.None {
		return fmt.Errorf("%s: etcd did not restore %s: %s; nothing was written there, so run devata bootstrap --recover-from again once the snapshot is checked (devata backup etcd writes verified ones)", m.Name, path, svc.Event)
	}
	return fmt.Errorf("%s: etcd did not restore %s: %s. Talos' restore (etcdutl) writes etcd's data directory before it checks the snapshot's hash, so %s now holds data of no running cluster: a Bootstrap there answers AlreadyExists and etcd will not start from it after a reboot. "+
		"The file here was verified before it was sent, so suspect what the node wrote (its disk or memory). Wipe its EPHEMERAL partition, which keeps its config (devata has no command for this; devata remove would wipe the whole disk): %s; once it is back, run devata bootstrap --recover-from %s again",
		m.Name, path, svc.Event, m.Name, wipeCommand(m), path)
}
