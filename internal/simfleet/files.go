package simfleet

import (
	"os"
	"path/filepath"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"gopkg.in/yaml.v3"

	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
	"devata.dev/devata/sim"
)

// WriteFiles writes dir/talosconfig (endpoints: the control planes' simulated
// addresses; nodes: every machine by name, which the sim routes) and the
// settings file dir/devata.yaml with one dial override per machine, and the
// kubeconfig when there is one; it returns both paths.
func WriteFiles(dir string, inv *inventory.Inventory, r *render.Renderer, fleet *sim.Fleet, kubeconfig string) (talosconfig, settings string, err error) {
	tcBytes, err := r.Talosconfig()
	if err != nil {
		return "", "", err
	}
	tc, err := clientconfig.FromBytes(tcBytes)
	if err != nil {
		return "", "", err
	}
	ctx := tc.Contexts[tc.Context]
	ctx.Endpoints, ctx.Nodes = nil, nil
	dial := map[string]string{}
	for _, m := range fleet.Machines() {
		dial[m.Name()] = m.Addr()
		ctx.Nodes = append(ctx.Nodes, m.Name())
		if im := inv.Machine(m.Name()); im != nil && im.IsControlPlane() {
			ctx.Endpoints = append(ctx.Endpoints, m.Addr())
		}
	}
	tcBytes, err = tc.Bytes()
	if err != nil {
		return "", "", err
	}
	tcPath := filepath.Join(dir, "talosconfig")
	if err := render.WriteSecretFile(tcPath, tcBytes, true); err != nil {
		return "", "", err
	}
	invPath, err := filepath.Abs(inv.Path)
	if err != nil {
		return "", "", err
	}
	values := map[string]any{
		"inventory":   invPath,
		"talosconfig": tcPath,
		"dial":        dial,
		"simulated":   true,
	}
	if kubeconfig != "" {
		values["kubeconfig"] = kubeconfig
	}
	data, err := yaml.Marshal(values)
	if err != nil {
		return "", "", err
	}
	cfgPath := filepath.Join(dir, "devata.yaml")
	header := "# written by devata sim: dial overrides point the inventory's machines at a SIMULATED fleet\n"
	if err := os.WriteFile(cfgPath, append([]byte(header), data...), 0o600); err != nil {
		return "", "", err
	}
	return tcPath, cfgPath, nil
}
