package drift

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Unreachable is the Unknown of a check on a machine the pass could not
// observe: err says why, and the next step is to see that the machine is
// up and its Talos API reachable (talosctlVersion: the talosctl command
// line that asks it, as devata dialled it). Every family's checks say it
// the same way.
func Unreachable(machine string, err error, talosctlVersion string) Result {
	return Unknown(err, "check that "+machine+" is up and its Talos API reachable: "+talosctlVersion)
}

// ReadFailed is the Unknown of a read that failed: next is what to look
// at, unless the Talos API denied the read, when the talosconfig's
// certificate lacks a role and needs says which ("MachineConfig needs
// os:admin") and use which talosconfig to take instead.
func ReadFailed(err error, next, needs, use string) Result {
	return Unknown(err, ReadNext(err, next, needs, use))
}

// ReadNext is ReadFailed's next step, for a drift.Findings.
func ReadNext(err error, next, needs, use string) string {
	if Denied(err) {
		return "the talosconfig's certificate lacks the role this read needs (" + needs + "): use " + use
	}
	return next
}

// Denied reports whether err is the Talos API's PermissionDenied, wrapped
// or not (as machinery's client.StatusCode unwraps it).
func Denied(err error) bool {
	type grpcStatus interface {
		GRPCStatus() *status.Status
		error
	}
	var st grpcStatus
	return errors.As(err, &st) && st.GRPCStatus().Code() == codes.PermissionDenied
}
