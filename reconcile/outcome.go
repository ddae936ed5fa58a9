package reconcile

// Outcome is how one machine's sync ended (Reconciler.Reconcile): the
// values of PassResult.Outcomes, one per queued machine, and what reconcile
// --once prints beside each. It is not what a rollout did over a plan
// (RolloutResult), nor an audit record's result (Result*, the log's
// vocabulary): a sync runs a rollout of its machine alone and sums it up as
// one Outcome. Where an outcome and an audit result name the same end they
// spell it the same.
type Outcome string

// The outcomes of a machine's sync.
const (
	OutcomeInSync Outcome = "in-sync"
	// OutcomeConverged: its change was made and it runs the desired config.
	OutcomeConverged Outcome = "converged"
	// OutcomeUpgraded: converged by a Talos upgrade (reconcile --upgrade),
	// which fixes talos-version where a config change fixes config.
	OutcomeUpgraded Outcome = "upgraded"
	// OutcomeJoined: configured from maintenance mode (reconcile --join)
	// and seen running its desired config on cluster.talosVersion, running
	// and ready, a member of etcd (a control plane) and its Node registered:
	// that fixes config, talos-version, machine-stage and etcd; its kubelet
	// (the Node's readiness) is the next pass's.
	OutcomeJoined Outcome = "joined"
	// OutcomeJoinedOtherVersion: joined as OutcomeJoined, but on another
	// Talos version than cluster.talosVersion (its install image's): that
	// talos-version drift is left, for devata upgrade.
	OutcomeJoinedOtherVersion Outcome = "joined-other-version"
	// OutcomeFailed: it could not be planned, or its change failed.
	OutcomeFailed Outcome = "failed"
	// OutcomeBlocked: a gate (or the quorum rule) kept its change from
	// starting; nothing was sent.
	OutcomeBlocked Outcome = "blocked"
	// OutcomeDryRun: it would be changed; --dry-run sent nothing.
	OutcomeDryRun Outcome = "dry-run"
	// OutcomeInterrupted: stopped before anything was sent, or abandoned.
	OutcomeInterrupted Outcome = "interrupted"
	// OutcomeGone: no longer in the inventory or the shard.
	OutcomeGone Outcome = "gone"
	// OutcomeHeld: left alone on purpose (a hold, a maintenance window, a
	// pending try or a staged config); drift is left.
	OutcomeHeld Outcome = "held"
	// OutcomePartial: changed part way on purpose: the Kubernetes components
	// the plan let move did, the others wait for a later pass; drift is left.
	OutcomePartial Outcome = "partial"
)
