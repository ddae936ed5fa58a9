package sim

import (
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Who may call what: machined's authorizer (services/machined.go rules)
// for a configured node, and the maintenance service's short list for a
// node without config.

var errNotAuthorized = status.Error(codes.PermissionDenied, "not authorized")

var (
	allRoles   = role.MakeSet(role.Admin, role.Operator, role.Reader)
	adminRole  = role.MakeSet(role.Admin)
	operatorUp = role.MakeSet(role.Admin, role.Operator)
	etcdRead   = role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup)
	// a snapshot holds every Secret: os:reader may not take one
	// (services/machined.go rules)
	etcdBackup = role.MakeSet(role.Admin, role.Operator, role.EtcdBackup)
)

// rules mirror machined's authorizer for the methods the sim serves; any
// other method needs os:admin.
var rules = map[string]role.Set{
	"/machine.MachineService/ApplyConfiguration": adminRole,
	"/machine.MachineService/Bootstrap":          adminRole,
	"/machine.MachineService/EtcdMemberList":     etcdRead,
	"/machine.MachineService/EtcdSnapshot":       etcdBackup,
	"/machine.MachineService/EtcdStatus":         etcdRead,
	"/machine.MachineService/Hostname":           allRoles,
	"/machine.MachineService/ImagePull":          operatorUp,
	"/machine.MachineService/Kubeconfig":         adminRole,
	"/machine.MachineService/List":               allRoles,
	"/machine.MachineService/Memory":             allRoles,
	"/machine.MachineService/Mounts":             allRoles,
	"/machine.MachineService/Read":               adminRole,
	"/machine.MachineService/Reboot":             operatorUp,
	"/machine.MachineService/ServiceList":        allRoles,
	"/machine.MachineService/Upgrade":            adminRole,
	"/machine.MachineService/Version":            allRoles,

	"/machine.MachineService/Containers":    allRoles,
	"/machine.MachineService/ImageList":     allRoles,
	"/machine.MachineService/EtcdAlarmList": role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup),
	"/time.TimeService/Time":                allRoles,
	"/time.TimeService/TimeCheck":           allRoles,

	// Talos 1.13 and later
	"/machine.ImageService/List":        allRoles,
	"/machine.ImageService/Pull":        operatorUp,
	"/machine.LifecycleService/Install": adminRole,
	"/machine.LifecycleService/Upgrade": adminRole,

	// per-type authorization is the access policy's job
	"/cosi.resource.State/Create":  adminRole,
	"/cosi.resource.State/Destroy": adminRole,
	"/cosi.resource.State/Get":     allRoles,
	"/cosi.resource.State/List":    allRoles,
	"/cosi.resource.State/Update":  adminRole,
	"/cosi.resource.State/Watch":   allRoles,
}

func authorize(fullMethod string, roles role.Set) error {
	allowed, ok := rules[fullMethod]
	if !ok {
		allowed = adminRole
	}

	if !allowed.IncludesAny(roles) {
		return errNotAuthorized
	}

	return nil
}

// maintenanceMethods are the ones a node without config answers; the rest
// are unimplemented there, as in Talos' maintenance service.
var maintenanceMethods = map[string]bool{
	"ApplyConfiguration": true,
	"Upgrade":            true, // answers Unimplemented itself (upgrade.go)
	"Version":            true,
}
