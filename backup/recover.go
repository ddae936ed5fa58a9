package backup

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"devata.dev/devata/inventory"
	"devata.dev/devata/snapshot"
)

// ErrForeignSnapshot is wrapped by CheckSnapshotOf when a snapshot is not
// of the inventory's cluster.
var ErrForeignSnapshot = errors.New("not a snapshot of this cluster")

// ReadSidecar reads the sidecar of the snapshot at path (path+".json",
// as Etcd writes it): nil, nil when there is none (talosctl etcd snapshot
// writes none). It is read as every file devata reads (bounded, regular
// files only) and its errors quote nothing of it.
func ReadSidecar(path string) (*Sidecar, error) {
	data, err := inventory.ReadFile(SidecarPath(path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s Sidecar
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s is not a devata sidecar (not its JSON): move it away, or restore the one backup etcd wrote with the snapshot", SidecarPath(path))
	}
	return &s, nil
}

// CheckSnapshotOf refuses a snapshot that is not of inv's cluster before
// anything is uploaded: its sidecar (when there is one) must name the
// cluster, and every voting member it holds must be a control plane of the
// inventory (etcd names members after their hostnames, which devata sets
// to the machines' names). A snapshot of another cluster restored here
// would bring back that cluster's every object and certificate trust.
func CheckSnapshotOf(inv *inventory.Inventory, f *snapshot.File, side *Sidecar) error {
	var why []string
	if side != nil && side.Cluster != inv.Cluster.Name {
		why = append(why, fmt.Sprintf("its sidecar names cluster %q, the inventory %q", side.Cluster, inv.Cluster.Name))
	}
	var cps, strangers []string
	for _, m := range inv.ControlPlanes() {
		cps = append(cps, m.Name)
	}
	for _, name := range f.Voters() {
		if !slices.Contains(cps, name) {
			strangers = append(strangers, fmt.Sprintf("%q", name))
		}
	}
	if len(strangers) > 0 {
		why = append(why, fmt.Sprintf("its etcd members %s are not control planes of the inventory (%s)", strings.Join(strangers, ", "), strings.Join(cps, ", ")))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; restore a snapshot devata backup etcd took of %s, or, if the control planes were renamed since, pass --foreign-snapshot to restore it anyway", ErrForeignSnapshot, strings.Join(why, "; "), inv.Cluster.Name)
}
