package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	yaml "go.yaml.in/yaml/v4"
)

// DefaultImageFactory is Image Factory's public host.
const DefaultImageFactory = "factory.talos.dev"

// canonicalSchematic is a schematic as Image Factory marshals it to take its
// id (image-factory v0.9.0 pkg/schematic: Schematic.Marshal is
// go.yaml.in/yaml/v4's Marshal of these fields, in this order, with these
// omitempty rules; ID is the hex sha256 of that text). Only the fields
// devata declares are here; the ones it does not (meta, bootloader,
// secureboot) are zero, which Marshal leaves out.
type canonicalSchematic struct {
	Overlay       canonicalOverlay       `yaml:"overlay,omitempty"`
	Customization canonicalCustomization `yaml:"customization"`
}

type canonicalOverlay struct {
	Image string `yaml:"image"`
	Name  string `yaml:"name"`
}

type canonicalCustomization struct {
	ExtraKernelArgs  []string                  `yaml:"extraKernelArgs,omitempty"`
	SystemExtensions canonicalSystemExtensions `yaml:"systemExtensions,omitempty"`
}

type canonicalSystemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

// ID is the schematic's id, as Image Factory computes it: the hex sha256 of
// its canonical YAML. A nil schematic is the empty one.
func (s *Schematic) ID() string {
	var c canonicalSchematic
	if s != nil {
		if s.Overlay != nil {
			c.Overlay = canonicalOverlay{Image: s.Overlay.Image, Name: s.Overlay.Name}
		}
		c.Customization.ExtraKernelArgs = s.Customization.ExtraKernelArgs
		c.Customization.SystemExtensions.OfficialExtensions = s.Customization.SystemExtensions.OfficialExtensions
	}
	data, _ := yaml.Marshal(&c) //nolint:errcheck // strings and lists of them always marshal
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Extensions are the schematic's system extensions by the name Talos
// reports them under (ExtensionStatus metadata.name): an official
// extension's name without its "siderolabs/" publisher.
func (s *Schematic) Extensions() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.Customization.SystemExtensions.OfficialExtensions))
	for _, e := range s.Customization.SystemExtensions.OfficialExtensions {
		out = append(out, ExtensionName(e))
	}
	return out
}

// ExtensionName is the name Talos reports an extension under: the last
// element of its image name (siderolabs/iscsi-tools: iscsi-tools).
func ExtensionName(e string) string {
	return e[strings.LastIndex(e, "/")+1:]
}

// SchematicOf is the schematic m's boot image is declared with: its own,
// its role's, the cluster's, or nil.
func (inv *Inventory) SchematicOf(m *Machine) *Schematic {
	switch {
	case m.Schematic != nil:
		return m.Schematic
	case m.IsControlPlane() && inv.Cluster.ControlPlane.Schematic != nil:
		return inv.Cluster.ControlPlane.Schematic
	case !m.IsControlPlane() && inv.Cluster.Workers.Schematic != nil:
		return inv.Cluster.Workers.Schematic
	}
	return inv.Cluster.Schematic
}

// MachineInstallImage is the installer m installs and upgrades with to
// cluster.talosVersion: cluster.installImage when the inventory gives one
// (it wins over schematics), else the Image Factory metal installer of m's
// schematic, else Talos' default installer (talos.DefaultInstallImage).
func (inv *Inventory) MachineInstallImage(m *Machine) string {
	c := &inv.Cluster
	s := inv.SchematicOf(m)
	if c.installImageGiven || s == nil {
		return c.InstallImage
	}
	return c.ImageFactory + "/metal-installer/" + s.ID() + ":" + c.TalosVersion
}

// InstallImageGiven says whether cluster.installImage was written in the
// inventory rather than defaulted: it then wins over schematics.
func (inv *Inventory) InstallImageGiven() bool { return inv.Cluster.installImageGiven }
