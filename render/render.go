package render

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-multierror"
	"github.com/siderolabs/go-pointer"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"gopkg.in/yaml.v3"

	"devata.dev/devata/internal/configview"
	"devata.dev/devata/internal/talos"
	"devata.dev/devata/inventory"
	"devata.dev/devata/redact"
)

// Rendered is one machine's desired Talos config.
type Rendered struct {
	Machine string
	Role    string
	// Config is the machine config as sent to Talos: multi-document YAML, no comments.
	Config []byte
	// Patches lists the patch files applied, in order (cluster, role,
	// groups in the inventory's order, machine).
	Patches []string
	// Warnings are machinery's validation warnings, when validated.
	Warnings []string
}

// Renderer renders machine configs for one inventory and secrets bundle. The
// generated base config and the cluster and role patches are applied once per
// role; per machine only the machine's own fields and patches are applied.
type Renderer struct {
	inv   *inventory.Inventory
	input *generate.Input
	// contract is the Talos version the configs are written for
	// (contract.go: where each setting lives)
	contract *coreconfig.VersionContract
	base     map[string]coreconfig.Provider // role -> base with cluster and role patches
	// patches applied to the base of each role, for reporting
	rolePatches map[string][]string
	mu          sync.Mutex // guards loaded: machines render in parallel
	loaded      map[string]configpatcher.Patch
}

// NewRenderer prepares rendering: it generates the base configs from the
// cluster section and loads every patch file once.
func NewRenderer(inv *inventory.Inventory, bundle *secrets.Bundle) (*Renderer, error) {
	c := &inv.Cluster
	contract, err := coreconfig.ParseContractFromVersion(c.TalosVersion)
	if err != nil {
		return nil, fmt.Errorf("cluster.talosVersion %s: %w", c.TalosVersion, err)
	}
	opts := []generate.Option{
		generate.WithSecretsBundle(bundle),
		generate.WithVersionContract(contract),
		generate.WithInstallImage(c.InstallImage),
		generate.WithDNSDomain(c.Network.DNSDomain),
		generate.WithEndpointList(controlPlaneAddresses(inv)),
		generate.WithRoles(role.MakeSet(role.Admin)),
	}
	if c.Cilium.K8sServiceHost == "localhost" {
		// Cilium reaches the API server through KubePrism on every node.
		opts = append(opts, generate.WithKubePrismPort(c.Cilium.K8sServicePort))
	}
	input, err := generate.NewInput(c.Name, c.Endpoint, trimV(c.KubernetesVersion), opts...)
	if err != nil {
		return nil, fmt.Errorf("generate input: %w", err)
	}
	input.PodNet = slices.Clone(c.Network.PodSubnets)
	input.ServiceNet = slices.Clone(c.Network.ServiceSubnets)

	r := &Renderer{inv: inv, input: input, contract: contract, base: map[string]coreconfig.Provider{}, rolePatches: map[string][]string{}, loaded: map[string]configpatcher.Patch{}}
	for _, rl := range []struct {
		name    string
		typ     machine.Type
		patches []string
	}{
		{inventory.RoleControlPlane, machine.TypeControlPlane, c.ControlPlane.Patches},
		{inventory.RoleWorker, machine.TypeWorker, c.Workers.Patches},
	} {
		cfg, err := input.Config(rl.typ)
		if err != nil {
			return nil, fmt.Errorf("generate %s config: %w", rl.name, err)
		}
		if cfg, err = declareNetwork(cfg, c, contract); err != nil {
			return nil, err
		}
		files := append(slices.Clone(c.Patches), rl.patches...)
		cfg, err = r.applyPatches(cfg, files)
		if err != nil {
			return nil, fmt.Errorf("%s patches: %w", rl.name, err)
		}
		r.base[rl.name] = cfg
		r.rolePatches[rl.name] = files
	}
	return r, nil
}

func (r *Renderer) applyPatches(cfg coreconfig.Provider, files []string) (coreconfig.Provider, error) {
	if len(files) == 0 {
		return cfg, nil
	}
	patches := make([]configpatcher.Patch, 0, len(files))
	for _, f := range files {
		p, err := r.patch(f)
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), patches)
	if err != nil {
		return nil, fmt.Errorf("apply patches %v: %w", files, err)
	}
	return out.Config()
}

func (r *Renderer) patch(file string) (configpatcher.Patch, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.loaded[file]; ok {
		return p, nil
	}
	path, err := inventory.Confine(filepath.Dir(r.inv.Path), r.inv.Cluster.ReadableDirs, file)
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	data, err := inventory.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read patch: %w", err)
	}
	p, err := configpatcher.LoadPatch(data)
	if err != nil {
		// machinery's error quotes the patch: keep only what is safe
		return nil, fmt.Errorf("load patch %s: %s", file, redact.DecodeError(err))
	}
	r.loaded[file] = p
	return p, nil
}

// Render renders one machine: the role's base, then the machine's inventory
// fields (hostname, install disk, labels, volumes, kubelet mounts), then the
// machine's own patches, which may override anything before them.
func (r *Renderer) Render(m *inventory.Machine) (*Rendered, error) {
	return r.render(m, false)
}

// Provider renders one machine as a machinery config provider.
func (r *Renderer) Provider(m *inventory.Machine) (coreconfig.Provider, error) {
	base, ok := r.base[m.Role]
	if !ok {
		return nil, fmt.Errorf("%s: unknown role %q", m.Name, m.Role)
	}
	cfg, err := r.declareMachine(base, m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	// groups' patches sit between the role's and the machine's (issue 36)
	if cfg, err = r.applyPatches(cfg, append(r.inv.GroupPatches(m), m.Patches...)); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	return cfg, nil
}

// PatchOrder is every patch file applied to m, in the order applied:
// the cluster's, its role's, its groups' (in the inventory's order), its own.
func (r *Renderer) PatchOrder(m *inventory.Machine) []string {
	return slices.Concat(r.rolePatches[m.Role], r.inv.GroupPatches(m), m.Patches)
}

// applyMachineFields sets, on the v1alpha1 document, the machine's fields
// that the contract keeps there (contract.go).
func applyMachineFields(cfg *v1alpha1.Config, m *inventory.Machine, contract *coreconfig.VersionContract, installImage string) error {
	mc := cfg.MachineConfig
	if !hostnameDocument(contract) {
		if mc.MachineNetwork == nil {
			mc.MachineNetwork = &v1alpha1.NetworkConfig{}
		}
		mc.MachineNetwork.NetworkHostname = m.Name
	}
	if kubernetesDocuments(contract) {
		if kubeletMounts(m) {
			mc.MachineKubelet = &v1alpha1.KubeletConfig{} //nolint:staticcheck // no document form for extraMounts (contract.go)
			addKubeletMounts(mc, m)
		}
		return nil // install and labels are documents (declareMachine)
	}
	if mc.MachineInstall == nil {
		mc.MachineInstall = &v1alpha1.InstallConfig{}
	}
	if err := setInstallDisk(mc.MachineInstall, m); err != nil {
		return err
	}
	mc.MachineInstall.InstallImage = installImage //nolint:staticcheck // the field Talos up to 1.13 reads
	if nl := m.NodeLabels(); len(nl) > 0 {
		labels := make(map[string]string, len(mc.MachineNodeLabels)+len(nl))
		maps.Copy(labels, mc.MachineNodeLabels)
		maps.Copy(labels, nl)
		mc.MachineNodeLabels = labels
	}
	// machine.nodeTaints, as machinery v1.11.0 v1alpha1_types.go has it
	// (key: value:Effect), validated by labels.ValidateTaints
	if nt := m.NodeTaints(); len(nt) > 0 {
		taints := make(map[string]string, len(mc.MachineNodeTaints)+len(nt)) //nolint:staticcheck // the field Talos up to 1.13 reads
		maps.Copy(taints, mc.MachineNodeTaints)                              //nolint:staticcheck // idem
		maps.Copy(taints, nt)
		mc.MachineNodeTaints = taints //nolint:staticcheck // idem
	}
	addKubeletMounts(mc, m)
	return nil
}

// setInstallDisk sets the machine's install disk, or its selector, on in.
func setInstallDisk(in *v1alpha1.InstallConfig, m *inventory.Machine) error {
	if m.InstallDisk != "" {
		in.InstallDisk = m.InstallDisk
		in.InstallDiskSelector = nil
	} else if s := m.InstallDiskSelector; s != nil {
		sel := &v1alpha1.InstallDiskSelector{
			Name: s.Name, Model: s.Model, Serial: s.Serial, Modalias: s.Modalias,
			UUID: s.UUID, WWID: s.WWID, Type: v1alpha1.InstallDiskType(s.Type), BusPath: s.BusPath,
		}
		if s.Size != "" {
			sel.Size = &v1alpha1.InstallDiskSizeMatcher{}
			if err := yaml.Unmarshal([]byte(strconv.Quote(s.Size)), sel.Size); err != nil {
				return fmt.Errorf("installDiskSelector.size: %w", err)
			}
		}
		in.InstallDisk = ""
		in.InstallDiskSelector = sel
	}
	return nil
}

// addKubeletMounts adds the kubelet extraMounts the machine's volumes ask for.
func addKubeletMounts(mc *v1alpha1.MachineConfig, m *inventory.Machine) {
	for _, vol := range m.Volumes {
		if vol.KubeletMount == "" {
			continue
		}
		if mc.MachineKubelet == nil {
			mc.MachineKubelet = &v1alpha1.KubeletConfig{}
		}
		path := VolumeMountPath(vol.Name)
		mc.MachineKubelet.KubeletExtraMounts = append(mc.MachineKubelet.KubeletExtraMounts, v1alpha1.ExtraMount{
			Destination: path,
			Type:        "bind",
			Source:      path,
			Options:     []string{"bind", "rshared", vol.KubeletMount},
		})
	}
}

// VolumeMountPath is where Talos mounts a user volume.
func VolumeMountPath(name string) string { return "/var/mnt/" + name }

func userVolume(vol inventory.Volume) (config.Document, error) {
	doc := block.NewUserVolumeConfigV1Alpha1()
	doc.MetaName = vol.Name
	if err := doc.ProvisioningSpec.DiskSelectorSpec.Match.UnmarshalText([]byte(vol.DiskSelector)); err != nil {
		return nil, fmt.Errorf("diskSelector: %w", err)
	}
	if err := doc.ProvisioningSpec.ProvisioningMinSize.UnmarshalText([]byte(vol.MinSize)); err != nil {
		return nil, fmt.Errorf("minSize: %w", err)
	}
	if vol.MaxSize != "" {
		if err := doc.ProvisioningSpec.ProvisioningMaxSize.UnmarshalText([]byte(vol.MaxSize)); err != nil {
			return nil, fmt.Errorf("maxSize: %w", err)
		}
	} else {
		doc.ProvisioningSpec.ProvisioningGrow = pointer.To(true)
	}
	if err := doc.FilesystemSpec.FilesystemType.UnmarshalText([]byte(vol.Filesystem)); err != nil {
		return nil, fmt.Errorf("filesystem: %w", err)
	}
	return doc, nil
}

// Render renders every machine of the inventory. Per-machine failures are
// collected, so one bad machine patch does not hide the others.
func Render(inv *inventory.Inventory, bundle *secrets.Bundle) ([]*Rendered, error) {
	return renderAll(context.Background(), inv, bundle, false, nil)
}

// renderAll renders (and, when validate is set, validates) every machine on
// every core: machines are independent once the role bases are built, and
// at 100,000 machines rendering is a large part of a pass. The output keeps
// inventory order, and so does the aggregated error. When ctx is done
// before every machine is rendered, the error is an
// *inventory.InterruptedError and nothing rendered is returned.
func renderAll(ctx context.Context, inv *inventory.Inventory, bundle *secrets.Bundle, validate bool, only []string) ([]*Rendered, error) {
	r, err := NewRenderer(inv, bundle)
	if err != nil {
		return nil, err
	}
	return r.renderAll(ctx, inv, validate, only, true)
}

func (r *Renderer) renderAll(ctx context.Context, inv *inventory.Inventory, validate bool, only []string, keep bool) ([]*Rendered, error) {
	todo := make([]*inventory.Machine, 0, len(inv.Machines))
	want := make(map[string]bool, len(only))
	for _, name := range only {
		want[name] = true
	}
	for i := range inv.Machines {
		if len(only) == 0 || want[inv.Machines[i].Name] {
			todo = append(todo, &inv.Machines[i])
		}
	}
	out := make([]*Rendered, len(todo))
	errs := make([]error, len(todo))
	var next, finished atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(len(todo), 1)) {
		wg.Go(func() {
			for {
				// a look per machine: a machine takes a millisecond or so
				if ctx.Err() != nil {
					return
				}
				i := int(next.Add(1) - 1)
				if i >= len(todo) {
					return
				}
				out[i], errs[i] = r.render(todo[i], validate)
				if !keep && out[i] != nil {
					out[i].Config = nil
				}
				finished.Add(1)
			}
		})
	}
	wg.Wait()
	if done := int(finished.Load()); done < len(todo) {
		doing := "rendering"
		if validate {
			doing = "rendering and validating"
		}
		return nil, &inventory.InterruptedError{Doing: doing, Done: done, Total: len(todo), Cause: context.Cause(ctx)}
	}
	var merr *multierror.Error
	kept := out[:0]
	for i, rd := range out {
		if rd != nil {
			kept = append(kept, rd)
		}
		if errs[i] != nil {
			merr = multierror.Append(merr, errs[i])
		}
	}
	return kept, merr.ErrorOrNil()
}

// render renders one machine and, when validate is set, validates the
// provider its bytes were encoded from: parsing the bytes back would build
// the same provider again and cost more than the rest of the render.
func (r *Renderer) render(m *inventory.Machine, validate bool) (*Rendered, error) {
	cfg, err := r.Provider(m)
	if err != nil {
		return nil, err
	}
	// devata knows a machine by its hostname (apply, upgrade and remove
	// confirm it before they write): a patch may restate it, not change it
	if h := configview.Hostname(cfg); h != m.Name {
		return nil, fmt.Errorf("%s: its patches %v set the hostname to %q; devata names each machine's hostname after it and checks it before every write: remove the hostname from the patch, or rename the machine in the inventory", m.Name, r.PatchOrder(m), h)
	}
	// a config for an older release than the inventory's (a machine that
	// still runs it) cannot hold what its patches write in a later
	// release's documents: that Talos refuses them
	for _, d := range cfg.Documents() {
		if since, ok := talos.DocumentKinds[d.Kind()]; ok && since > r.contract.Minor {
			return nil, fmt.Errorf("%s runs Talos 1.%d, which refuses the %s document its patches %v write (it came with Talos 1.%d): upgrade it first (devata upgrade), or keep that setting a v1alpha1 field until every machine runs 1.%d",
				m.Name, r.contract.Minor, d.Kind(), r.PatchOrder(m), since, since)
		}
	}
	data, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, fmt.Errorf("%s: encode config: %w", m.Name, err)
	}
	rd := &Rendered{
		Machine: m.Name,
		Role:    m.Role,
		Config:  data,
		Patches: r.PatchOrder(m),
	}
	if !validate {
		return rd, nil
	}
	warnings, verr := cfg.Validate(metalMode{}, validation.WithLocal())
	rd.Warnings = warnings
	if verr != nil {
		return rd, fmt.Errorf("%s: rendered config is invalid for Talos: %w (check the patches applied to it: %v)", rd.Machine, verr, rd.Patches)
	}
	return rd, nil
}

// Talosconfig returns a talosctl client config for the cluster with an os:admin
// client certificate, endpoints set to the control planes and nodes to every machine.
func (r *Renderer) Talosconfig() ([]byte, error) {
	tc, err := r.input.Talosconfig()
	if err != nil {
		return nil, err
	}
	ctx := tc.Contexts[tc.Context]
	ctx.Nodes = nil
	for i := range r.inv.Machines {
		ctx.Nodes = append(ctx.Nodes, r.inv.Machines[i].Address)
	}
	return tc.Bytes()
}

// Validate validates a rendered config as Talos would on a bare-metal machine
// that installs to disk. It returns machinery's warnings.
func Validate(data []byte) ([]string, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil, err
	}
	return cfg.Validate(metalMode{}, validation.WithLocal())
}

// metalMode is Talos' runtime mode for a bare-metal machine.
type metalMode struct{}

func (metalMode) String() string        { return "metal" }
func (metalMode) RequiresInstall() bool { return true }
func (metalMode) InContainer() bool     { return false }

func controlPlaneAddresses(inv *inventory.Inventory) []string {
	var out []string
	for _, m := range inv.ControlPlanes() {
		if m.Port == inventory.DefaultTalosAPIPort {
			out = append(out, m.Address)
		} else {
			out = append(out, m.Endpoint())
		}
	}
	return out
}

func trimV(v string) string {
	if len(v) > 0 && v[0] == 'v' {
		return v[1:]
	}
	return v
}

// Validated renders every machine and validates each config with
// machinery in metal mode. Machinery's warnings are kept on each Rendered; every
// machine whose config fails is named in the aggregated error.
func Validated(inv *inventory.Inventory, bundle *secrets.Bundle) ([]*Rendered, error) {
	return renderAll(context.Background(), inv, bundle, true, nil)
}

// ValidatedContext is Validated that stops when ctx is done
// (Ctrl-C on a large fleet): every worker looks at ctx before each machine,
// and the error is then an *inventory.InterruptedError, nothing rendered.
func ValidatedContext(ctx context.Context, inv *inventory.Inventory, bundle *secrets.Bundle) ([]*Rendered, error) {
	return renderAll(ctx, inv, bundle, true, nil)
}
