package sim

import "github.com/blang/semver/v4"

// goVersions is the Go each Talos release was built with, as its machinery
// says in constants.GoVersion ("the version of Go compiler this release was
// built with", pkg/machinery/constants/constants.go of that tag), for the
// releases the sim is played at. machined reports it in Version's
// GoVersion (version.NewVersion: runtime.Version() of the machined binary),
// and Talos' VersionSuite/TestExpectedVersionMaster holds a node to it.
var goVersions = map[string]string{
	"v1.11.0": "go1.24.6",
	"v1.11.1": "go1.24.6",
	"v1.11.5": "go1.24.9",
	"v1.12.1": "go1.25.5",
	"v1.12.4": "go1.25.7",
	"v1.13.0": "go1.26.2",
	"v1.13.9": "go1.26.6",
	"v1.14.1": "go1.26.8",
}

// goVersionOf is the Go that built Talos version tag. A tag the table does
// not hold gets the Go of the nearest release below it of the same minor
// (patch releases only ever move Go forward), else the oldest of that
// minor; a tag of a minor the table does not know gets the newest entry.
func goVersionOf(tag string) string {
	if g, ok := goVersions[tag]; ok {
		return g
	}

	want, err := semver.ParseTolerant(tag)

	var (
		best    semver.Version
		bestTag string
		newest  semver.Version
		newTag  string
	)

	for t := range goVersions {
		v := semver.MustParse(t[1:])
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

	return goVersions[bestTag]
}
