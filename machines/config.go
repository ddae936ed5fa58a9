package machines

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/talosapi"
)

func checkConfig(_ context.Context, t *target.Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	o, name := t.Obs, t.Machine.Name
	if o.ConfigErr != nil {
		return []drift.Result{unknownRead(t, o.ConfigErr)}
	}
	if len(t.Desired) == 0 {
		return []drift.Result{drift.Unknown(errors.New("no desired config was rendered for this machine"), "devata validate, then devata gen config: does "+name+" render?")}
	}
	d, err := talosapi.DiffConfigs(o.Active, t.Desired)
	if err != nil {
		return []drift.Result{drift.Unknown(fmt.Errorf("compare configs: %w", err), t.TalosctlFor("get machineconfig -o yaml"))}
	}
	evidence := []string{"MachineConfig v1alpha1 sha256:" + short(o.ActiveHash)}
	desiredHash := sumOf(t.Desired)
	if d.Equal {
		if o.HasPersistent && o.PersistentHash != o.ActiveHash {
			return []drift.Result{drift.Drifted("another config is staged for the next boot", "sha256:"+short(desiredHash), "staged sha256:"+short(o.PersistentHash)).
				WithEvidence(append(evidence, "MachineConfig persistent sha256:"+short(o.PersistentHash))...).
				WithNext("devata apply --machines " + name + " (re-applies the desired config, replacing the staged one)")}
		}
		return []drift.Result{drift.InSync(evidence...)}
	}
	if mismatch, err := talosapi.Foreign(o.Active, t.Desired, talosapi.OtherMachine(t.Inventory, t.Machine)); err == nil && mismatch.Any() {
		// not a diff to apply: the machine answering is not this one
		what := "another machine answers at " + o.Endpoint + ": " + strings.Join(mismatch.Machine, "; ")
		next := "check " + name + "'s address in the inventory (the machine there is not " + name + "); devata writes nothing to it"
		if len(mismatch.Bundle) > 0 {
			what = "the machine at " + o.Endpoint + " runs a config of another cluster or secrets bundle: " + strings.Join(mismatch.Bundle, "; ")
			next = "recover the cluster's secrets bundle (devata gen secrets --from-controlplane-config, a backup, or its encrypted copy), or check that the inventory is this cluster's; devata writes nothing to it"
		}
		return []drift.Result{drift.Drifted(what, name+" of this cluster", "not "+name).WithEvidence(evidence...).WithNext(next)}
	}
	reason := "applied config differs from the rendered one: " + d.Summary()
	next := "devata apply --machines " + name
	if o.HasPersistent && o.PersistentHash == desiredHash {
		reason = "desired config is staged but not applied (it takes effect on the next reboot); applied differs: " + d.Summary()
		next = "reboot " + name + " to apply it (" + t.TalosctlFor("reboot") + "), or devata apply --machines " + name
	}
	return []drift.Result{drift.Drifted(reason, "sha256:"+short(desiredHash), "sha256:"+short(o.ActiveHash)).
		WithDiff(d.Text).WithChanges(d.Changes...).WithEvidence(evidence...).WithNext(next)}
}

func short(h [32]byte) string { return hex.EncodeToString(h[:6]) }

func sumOf(b []byte) [32]byte { return sha256.Sum256(b) }
