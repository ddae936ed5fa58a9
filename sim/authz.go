package sim

import (
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Who may call what: machined's authorizer (services/machined.go rules)
// for a configured node and, from 1.13, for a node without config, whose
// callers are all os:reader; up to 1.12 the maintenance service's short
// list for a node without config.

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

// authorizeMaintenance is machined's authorizer on a Talos 1.13+ machine
// without config: its rules, but ApplyConfiguration admits os:reader "for
// maintenance only, verified in the handler" (v1.13.9
// system/services/machined.go rules; v1alpha1_server.go
// ApplyConfiguration refuses a non-admin once the config is complete).
func authorizeMaintenance(fullMethod string, roles role.Set) error {
	if fullMethod == "/machine.MachineService/ApplyConfiguration" && roles.IncludesAny(role.MakeSet(role.Admin, role.Reader)) {
		return nil
	}

	return authorize(fullMethod, roles)
}

// servedInMaintenance113 are the methods the sim plays on a Talos 1.13+
// machine without config, once authorized: Version, ApplyConfiguration,
// resource reads (the access policy decides per type), TimeService,
// ImageService and LifecycleService. Other methods os:reader may call
// (ServiceList, Mounts, the etcd reads, …) answer Unimplemented "not
// modelled": the sim does not invent what machined answers there.
func servedInMaintenance113(fullMethod string) bool {
	switch fullMethod {
	case "/machine.MachineService/Version", "/machine.MachineService/ApplyConfiguration":
		return true
	}

	return strings.HasPrefix(fullMethod, "/cosi.") || serviceOf(fullMethod) == "time.TimeService" || since113[serviceOf(fullMethod)]
}
