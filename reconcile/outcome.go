package reconcile

// Outcomes of one machine's sync in a pass: the values of PassResult.Outcomes,
// one per queued machine. They are not rollout's Outcome, the struct that says
// what one Rollout.Run did over a plan (which machines converged, failed or
// were left untouched, and why it stopped); a machine's sync runs such a
// rollout of that machine alone and sums it up as one of these strings. The
// ones that name an action's end are the audit results of the same name.
// They stay untyped strings, so that PassResult.Outcomes stays the
// map[string]string its callers read and compare.
const (
	OutcomeInSync    = "in-sync"
	OutcomeConverged = ResultConverged
	// OutcomeUpgraded: converged by a Talos upgrade (reconcile --upgrade),
	// which fixes talos-version where a config change fixes config.
	OutcomeUpgraded = "upgraded"
	// OutcomeJoined: configured from maintenance mode (reconcile --join)
	// and seen running its desired config on cluster.talosVersion, running
	// and ready, a member of etcd (a control plane) and its Node registered:
	// that fixes config, talos-version, machine-stage and etcd; its kubelet
	// (the Node's readiness) is the next pass's.
	OutcomeJoined = "joined"
	// OutcomeJoinedOtherVersion: joined as OutcomeJoined, but on another
	// Talos version than cluster.talosVersion (its install image's): that
	// talos-version drift is left, for devata upgrade.
	OutcomeJoinedOtherVersion = "joined-other-version"
	OutcomeFailed             = ResultFailed
	OutcomeBlocked            = ResultBlocked
	OutcomeDryRun             = ResultDryRun
	OutcomeInterrupted        = ResultInterrupted
	OutcomeGone               = "gone" // no longer in the inventory or the shard
	// OutcomeHeld: left alone on purpose (a pending try or a staged config); drift is left.
	OutcomeHeld = "held"
	// OutcomePartial: changed part way on purpose: the Kubernetes components
	// the plan let move did, the others wait for a later pass; drift is left.
	OutcomePartial = "partial"
)
