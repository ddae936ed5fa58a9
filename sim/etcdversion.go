package sim

import (
	"strings"

	"github.com/blang/semver/v4"
)

// etcdVersions is the etcd each Talos release runs unless its config names
// another image: machinery's constants.DefaultEtcdVersion of that tag
// (pkg/machinery/constants/constants.go; v1alpha1_etcdconfig.go
// EtcdConfig.Image falls back to constants.EtcdImage:DefaultEtcdVersion,
// and a generated config names no image). Talos 1.12 moved the image from
// gcr.io/etcd-development/etcd to registry.k8s.io/etcd, and 1.14 to etcd
// 3.7 (its constant has no "v").
var etcdVersions = map[string]string{
	"v1.11.0": "3.6.4",
	"v1.11.1": "3.6.4",
	"v1.11.5": "3.6.5",
	"v1.12.0": "3.6.7",
	"v1.12.1": "3.6.7",
	"v1.12.4": "3.6.7",
	"v1.13.0": "3.6.9",
	"v1.13.9": "3.6.12",
	"v1.14.1": "3.7.1",
}

// etcdVersionOf is the etcd a machine's etcd service runs: the tag of the
// active config's cluster.etcd.image when it names one that is a version
// (the etcd binary reports its own version.Version in Maintenance.Status),
// else the default of the machine's Talos release.
func etcdVersionOf(s snapshot) string {
	if s.active != nil {
		if raw := s.active.RawV1Alpha1(); raw != nil && raw.ClusterConfig != nil && raw.ClusterConfig.EtcdConfig != nil {
			if img := raw.ClusterConfig.EtcdConfig.ContainerImage; img != "" {
				if ref, err := parseDockerRef(img); err == nil && ref.tag != "" {
					if v, err := semver.ParseTolerant(ref.tag); err == nil {
						return v.String()
					}
				}
			}
		}
	}

	return releaseValue(etcdVersions, s.version)
}

// etcdStorageVersion is what etcd's Status reports as StorageVersion
// (v3rpc/maintenance.go Status: the schema version of the backend's meta
// bucket), which etcd migrates to the cluster version
// (etcdserver/version/monitor.go UpdateStorageVersionIfNeeded,
// adapters.go UpdateStorageVersion), the lowest major.minor of its
// members' versions (monitor.go decideClusterVersion): "3.6.0" while any
// member still runs 3.6, "3.7.0" once all run 3.7. Members count whether
// they run or not (etcd does not move the cluster version while a member's
// version is unknown); the caller holds the fleet's lock.
func (c *etcdCluster) storageVersion() string {
	var lowest *semver.Version

	for _, mem := range c.members {
		v, err := semver.ParseTolerant(etcdVersionOf(mem.m.snap()))
		if err != nil {
			continue
		}

		v = semver.Version{Major: v.Major, Minor: v.Minor}
		if lowest == nil || v.LT(*lowest) {
			lowest = &v
		}
	}

	if lowest == nil {
		return ""
	}

	return lowest.String()
}

// etcdVersionsOf are the etcd version m's member runs and the storage
// version its cluster reports (EtcdStatus).
func (f *Fleet) etcdVersionsOf(m *Machine) (server, storage string) {
	f.mu.Lock()
	defer f.mu.Unlock()

	m.mu.Lock()
	c := m.etcdCluster
	m.mu.Unlock()

	server = etcdVersionOf(m.snap())
	if c == nil {
		return server, ""
	}

	return server, c.storageVersion()
}

// releaseValue is table's entry for Talos version tag. A tag the table does
// not hold gets the entry of the nearest release below it of the same
// minor (patch releases only ever move forward), else the oldest of that
// minor; a tag of a minor the table does not know gets the newest entry.
func releaseValue(table map[string]string, tag string) string {
	if v, ok := table[tag]; ok {
		return v
	}

	want, err := semver.ParseTolerant(tag)

	var (
		best    semver.Version
		bestTag string
		newest  semver.Version
		newTag  string
	)

	for t := range table {
		v := semver.MustParse(strings.TrimPrefix(t, "v"))
		if newTag == "" || v.GT(newest) {
			newest, newTag = v, t
		}

		if err != nil || v.Major != want.Major || v.Minor != want.Minor {
			continue
		}

		below, bestBelow := v.LTE(want), bestTag != "" && best.LTE(want)

		switch {
		case bestTag == "",
			below && (!bestBelow || v.GT(best)),
			!below && !bestBelow && v.LT(best):
			best, bestTag = v, t
		}
	}

	if bestTag == "" {
		bestTag = newTag
	}

	return table[bestTag]
}
