package sim

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

// goVersionOf is the Go that built Talos version tag (releaseValue).
func goVersionOf(tag string) string {
	return releaseValue(goVersions, tag)
}
