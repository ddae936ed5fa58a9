package reconcile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// Audit results: every action gets a "started" record before anything is sent
// and exactly one final record after, so a started record without a final one
// can only mean the process died in between.
const (
	ResultStarted     = "started"
	ResultConverged   = "converged"   // applied and the machine runs the desired config
	ResultFailed      = "failed"      // the apply or the wait for it failed
	ResultInterrupted = "interrupted" // stopped before anything was sent
	ResultBlocked     = "blocked"     // a gate failed before the change; nothing was sent
	ResultAbandoned   = "abandoned"   // still in flight when the grace period ended
	ResultDryRun      = "dry-run"     // would apply; --dry-run sent nothing
)

// AuditRecord is one line of the audit log. Diff is the redacted summary of
// the config change (changed secrets appear only as field paths). A
// machine's change names its machine; an action of the whole cluster (the
// sync of the bootstrap manifests, ActionSyncManifests) has none: no
// machine's name is empty.
type AuditRecord struct {
	Time    time.Time `json:"time"`
	Machine string    `json:"machine"`
	Action  string    `json:"action"`
	Mode    string    `json:"mode,omitempty"`
	Reboots bool      `json:"reboots,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Diff    string    `json:"diff,omitempty"`
	Result  string    `json:"result"`
	Error   string    `json:"error,omitempty"`
	// Via is the RPC an upgrade went through (LifecycleService.Upgrade or
	// MachineService.Upgrade), and Installer the installer's last lines of
	// output on the first.
	Via       string   `json:"via,omitempty"`
	Installer []string `json:"installer,omitempty"`
	// Kubernetes is the version whose bootstrap manifests a sync applied,
	// and Objects the objects it created or configured, by name
	// ("configured apps/v1 Deployment kube-system/coredns"), never their
	// contents.
	Kubernetes string   `json:"kubernetes,omitempty"`
	Objects    []string `json:"objects,omitempty"`
	// Interrupted marks an action that was finished after a shutdown or a
	// lost leadership asked the loop to stop.
	Interrupted bool   `json:"interrupted,omitempty"`
	Identity    string `json:"identity,omitempty"`
	Shard       string `json:"shard,omitempty"`
	// InventoryCommit, InventoryDirty and InventorySHA256 name the inventory
	// the action came from (Desired.Provenance): the commit and whether the
	// work tree was dirty, in Git only, and the file's sha256.
	InventoryCommit string `json:"inventoryCommit,omitempty"`
	InventoryDirty  bool   `json:"inventoryDirty,omitempty"`
	InventorySHA256 string `json:"inventorySha256,omitempty"`
}

// AuditLog writes AuditRecords as JSON Lines. It is safe for concurrent use;
// a nil *AuditLog discards records. A record is on disk (synced, where the
// writer can sync) when Record returns nil.
type AuditLog struct {
	mu       sync.Mutex
	name     string // in errors: the path, or "audit log"
	w        io.Writer
	closer   io.Closer
	identity string
	shard    string
}

// NewAuditLog writes records to w, stamped with the writer's identity
// (leader-election identity or host name) and shard.
func NewAuditLog(w io.Writer, identity string, shard Shard) *AuditLog {
	return &AuditLog{name: "audit log", w: w, identity: identity, shard: shard.String()}
}

// OpenAuditLog appends to the file at path (created 0600).
func OpenAuditLog(path, identity string, shard Shard) (*AuditLog, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	a := NewAuditLog(f, identity, shard)
	a.name, a.closer = "audit log "+path, f
	return a, nil
}

// Record writes one record, one line, in one write, and syncs it.
func (a *AuditLog) Record(r AuditRecord) error {
	if a == nil {
		return nil
	}
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	r.Identity, r.Shard = a.identity, a.shard
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.w == nil {
		return fmt.Errorf("%s: closed", a.name)
	}
	if _, err := a.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: write: %w", a.name, err)
	}
	if s, ok := a.w.(interface{ Sync() error }); ok {
		// A terminal, pipe or /dev/null cannot sync (EINVAL): what was
		// written is all there is to do.
		if err := s.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, errors.ErrUnsupported) {
			return fmt.Errorf("%s: sync: %w", a.name, err)
		}
	}
	return nil
}

// Close closes the file OpenAuditLog opened; later records fail.
func (a *AuditLog) Close() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.w = nil
	if a.closer != nil {
		return a.closer.Close()
	}
	return nil
}
