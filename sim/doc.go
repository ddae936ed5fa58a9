// Package sim serves a simulated fleet of Talos Linux machines over real gRPC
// and real mTLS, for devata's tests, `devata sim` and `devata demo`.
//
// It owns no devata logic and knows nothing about inventories: callers hand it
// a secrets bundle and machine configs, then talk to it with machinery's own
// client, as they would to Talos v1.11.
//
// # What a machine does
//
// Each machine has its own listener, open from Start to Close; one gRPC
// server (machinery's MachineService, ImageService and LifecycleService,
// and COSI's State service) serves them all, and every call serves the
// machine it was routed to. While a machine is down (rebooting,
// unreachable) its listener closes every connection at once, so a reboot
// never hands its port to anybody else.
//
//   - TLS: a configured machine presents an Ed25519 certificate from the
//     bundle's OS CA (its address as IP SAN, DigitalSignature, ServerAuth) and
//     requires a client certificate from that CA whose only extended key
//     usage is ClientAuth. Roles come from the certificate's Organization and
//     are checked per method as machined's authorizer does (unknown methods
//     need os:admin): PermissionDenied "not authorized".
//   - Roles are checked on each target, not at the endpoint: apid only reads
//     them (internal/app/apid/main.go installs authz.Injector and no
//     Authorizer) and hands them on in the talos-role metadata
//     (pkg/backend/apid.go and pkg/grpc/proxy/backend/local.go
//     GetConnection, authz.SetMetadata; the next apid trusts it because
//     apid's own client certificate is os:impersonator), and each target's
//     machined checks them (system/services/machined.go Main: Injector in
//     MetadataOnly mode, then Authorizer with its rules; COSI types then
//     internal/app/resources/access.go AccessPolicy). So a caller without
//     the role gets, on a `nodes` call, one error-only message per target
//     like any other node error (talosctl: "2 errors occurred: * cp-1: rpc
//     error: code = PermissionDenied desc = not authorized"), streamed
//     methods included, and on a `node` call the target's plain error.
//   - Maintenance mode (no config): a self-signed certificate, no client
//     certificate, every caller is os:reader. ApplyConfiguration in AUTO,
//     REBOOT or TRY mode installs the config and reboots into mTLS on the
//     same address; NO_REBOOT and STAGED are Unimplemented, as in Talos.
//     The boot after it runs the Install task (v1alpha1_sequencer_tasks.go
//     Install): a machine whose system disk holds no install (started in
//     maintenance mode, or reset with the whole system disk wiped) comes
//     back on the version its installer image is tagged with
//     (machine.install.image, else the default installer of the Talos
//     that installs: ghcr.io's up to 1.13, the Image Factory's metal
//     installer from 1.14, v1alpha1_sequencer_tasks.go Install in
//     v1.14.1), not the one it booted from; one whose STATE alone was wiped is still installed and
//     keeps its version.
//     Version answers Unimplemented "API is not implemented in maintenance
//     mode" (Talos only answers SideroLink peers), COSI reads work for
//     non-sensitive types, Bootstrap is FailedPrecondition, the rest
//     Unimplemented.
//   - apid routing: `node` metadata sends the call to one machine and returns
//     its plain reply; `nodes` fans out, stamps every message with
//     metadata.hostname = the target as typed and turns a failed target into
//     an error-only message (Metadata{Hostname, Error, Status}); streamed
//     replies are stamped the same way. Only the methods apid lists as
//     streamed (internal/app/apid/main.go, and names ending in "Stream")
//     are proxied as streams; grpc-proxy takes every other one as unary
//     (handler_one2many.go forwardClientsToServerMultiUnary), EtcdRecover's
//     client stream too: each client message goes to every target, and the
//     client gets one reply whose messages hold each target's, a failed
//     target's error among them (apid's pkg/backend/apid.go AppendInfo and
//     BuildError, streaming false). The endpoint's apid refuses some
//     `nodes` calls whole, before any target (director.go Director):
//     Talos 1.11 and 1.12 COSI's, InvalidArgument "one-2-many proxying is
//     not supported for COSI methods"; from 1.13 every method outside
//     MachineService, ClusterService, InspectService, StorageService and
//     TimeService (COSI, ImageService, LifecycleService),
//     InvalidArgument "one-2-many proxying is not supported for method
//     <full method>" (v1.13.0, v1.13.9, v1.14.1).
//     Targets are machine addresses (host:port, which real apid does not
//     take: loopback machines differ by port), names, or a host that only one
//     machine listens on. Unreachable, rebooting and maintenance targets fail
//     with Unavailable, as apid's dial would.
//   - A worker's endpoint forwards nothing (route.go route): machined
//     issues a worker no API client certificate (controllers/secrets/
//     api.go generateWorker; generateControlPlane's is os:impersonator),
//     so apid's provider.go TLSConfig.ClientConfig is nil and apid's
//     main.go builds its router without remote backends. Its Director
//     (internal/app/apid/pkg/director/director.go) serves a call locally
//     when it has no routing metadata, or its `node`, or its `nodes` of
//     exactly one target, is the worker itself (IsLocalTarget,
//     local_address.go: the exact string is a NodeAddress "current"
//     address, a bare IP, or the HostnameStatus hostname or FQDN; the
//     sim also takes the worker's own host:port); such a `nodes` call is
//     one-to-one, a plain reply without metadata.hostname, and COSI is
//     served too. Any other `node` or `nodes` call is refused whole,
//     before a target is dialed or authorization runs, with
//     PermissionDenied "no request forwarding" (singleDirector,
//     aggregateDirector), a `nodes` call naming the worker among others
//     too; a `nodes` call apid does not fan out is InvalidArgument
//     first. Talos' own
//     integration test is internal/integration/api/apid.go
//     TestWorkerNoRouting (worker_endpoint_test.go,
//     talosctl_worker_test.go). A control plane's endpoint forwards to
//     any machine, workers included.
//   - ApplyConfiguration: the config is loaded and validated (metal mode)
//     before anything else. AUTO resolves to NO_REBOOT when the change is
//     live, else REBOOT; NO_REBOOT and TRY refuse changes that need a reboot
//     (InvalidArgument); STAGED writes only the persistent config; TRY reverts
//     after its timeout (default one minute); REBOOT replies, then takes the
//     node away for RebootDelay and boots it with the persisted config. A dry
//     run answers machined's text: "Dry run summary:\n<mode details> (skipped
//     in dry-run).\nConfig diff:\n\n<configdiff>" or "No changes.".
//     Live changes follow Talos v1.11's CanApplyImmediate: in the v1alpha1
//     document, debug, the whole cluster section and the machine fields ca,
//     acceptedCAs, time, certSANs, install, network, sysfs, sysctls, logging,
//     controlPlane, kubelet, kernel, registries, pods, seccompProfiles,
//     nodeAnnotations, nodeLabels, nodeTaints and the features
//     kubernetesTalosAPIAccess, kubePrism, hostDNS, imageCache and
//     nodeAddressSortAlgorithm; every other v1alpha1 change needs a reboot.
//     Other documents (UserVolumeConfig, …) always apply live. Runtime
//     validation runs as on Talos (see Storage).
//   - Bootstrap (v1alpha1_server.go Bootstrap): Unimplemented in maintenance
//     mode (internal/app/maintenance/server.go has no Bootstrap);
//     FailedPrecondition "bootstrap is not available yet" for
//     CRIStartDelay after a boot, while CRI comes up (v1alpha1_runtime.go
//     IsBootstrapAllowed), and on a worker; AlreadyExists once the node holds
//     etcd data. The guard is the node's own data directory only, so a
//     Bootstrap on a control plane that has not joined yet starts a second,
//     single-member etcd cluster (services/etcd.go with Bootstrap: true): the
//     fleet can be split, as Talos can (TestBootstrapTwiceSplitsEtcd).
//   - etcd membership (etcd.go): once a cluster exists, every configured,
//     booted control plane without data joins the oldest one: it is added as
//     a learner with no name (services/etcd.go addMember,
//     MemberAddAsLearner), and after EtcdJoinDelay its etcd starts and it is
//     promoted. Before the add, a member of its own hostname (its previous
//     life: a disk wiped without leaving etcd) is removed, as addMember
//     does, under etcd's strict reconfiguration check (removeMember); while
//     that is refused the join waits and retries, as buildInitialCluster's
//     retry does (TestEtcdRejoinReplacesTheMemberOfTheSameName). Its etcd service stays Preparing ("Running pre state", the
//     service runner's message while the PreFunc waits in
//     buildInitialCluster; the "etcd is waiting to join the cluster…" text
//     is a machined log line, not a service event) until it is added.
//     From the add to its promotion its etcd runs as a learner
//     (services/etcd.go: the PreFunc returns, promoteMember retries in the
//     background): etcd serves a learner Status and refuses it MemberList
//     (etcd v3.6 v3rpc interceptor.go isRPCSupportedForLearner,
//     rpctypes.ErrGRPCNotSupportedForLearner), so EtcdMemberList there
//     fails "etcdserver: rpc not supported for learner", code Unknown
//     (v1alpha1_server.go EtcdMemberList passes the client's error on),
//     EtcdStatus answers IsLearner, and the service runs unhealthy (its
//     health check's linearizable Get, internal/pkg/etcd ValidateQuorum,
//     is refused the same way) (TestEtcdLearnerRefusesTheMemberList).
//     EtcdMemberList and EtcdStatus answer on members (learners included);
//     on a control plane whose etcd does not run they never answer
//     Unavailable: for CRIStartDelay after a boot they fail as Talos' etcd
//     client does without its admin certificate (code Unknown, "error
//     building etcd client TLS config"), later they wait EtcdClientWait (or
//     the caller's deadline, if sooner) and answer DeadlineExceeded
//     (internal/pkg/etcd/etcd.go NewClient; Talos waits for the caller's
//     deadline). Unimplemented on workers.
//   - etcd's leader and quorum (etcd.go leader, memberListNoLeader; raft
//     with CheckQuorum as etcd runs it): a cluster has a leader only while
//     more than half of its voting members are healthy (running and not
//     Unreachable); a leader keeps its place while it is healthy, and one
//     that goes down is replaced at once by the first healthy voting
//     member (etcd takes its 1s election timeout).
//     Without quorum each member that still runs answers as Talos does:
//     EtcdStatus (v1alpha1_server.go EtcdStatus, passing etcd's
//     v3rpc/maintenance.go Status) with Leader 0 and "etcdserver: no
//     leader" in Errors; EtcdMemberList (v1alpha1_server.go
//     EtcdMemberList: clientv3.WithRequireLeader, a linearizable
//     MemberList) fails "etcdserver: no leader", code Unknown (etcd's
//     interceptor.go refuses it Unavailable, the client's retry
//     interceptor retries that 100 times 25ms apart, Options.
//     EtcdNoLeaderWait, and machined returns the EtcdError, which has no
//     gRPC status, unwrapped); EtcdSnapshot still streams the member's
//     local database (maintenance.go Snapshot needs no leader)
//     (TestEtcdWithoutQuorum).
//   - EtcdSnapshot (etcd_snapshot.go; v1alpha1_server.go EtcdSnapshot,
//     checkControlplane, internal/pkg/etcd/etcd.go NewLocalClient,
//     pkg/chunker/stream Chunker.Read; talosctl's cmd/talosctl/cmd/talos/
//     etcd.go etcdSnapshotCmd; etcdutl/snapshot/v3_snapshot.go Status and
//     saveDB; bbolt v1.4 internal/common page.go, meta.go, db.go init):
//     Unimplemented "etcd snapshot is only available on control plane
//     nodes" on a worker; os:admin, os:operator and os:etcd:backup only
//     (services/machined.go rules); on a control plane whose etcd does not
//     run, etcdNotRunning's answers worded as machined wraps them ("failed
//     to create etcd client: …", code Unknown; "failed reading etcd
//     snapshot: context deadline exceeded", DeadlineExceeded). A member
//     streams, in common.Data messages of 1024 bytes as the Chunker reads,
//     an etcd snapshot file: a real bbolt database (4 KiB pages) with etcd
//     v3.6's buckets (members as membership.Member JSON, meta with
//     consistent_index, term, confState and storageVersion, cluster, and
//     the key bucket of mvccpb.KeyValues by revision), then the sha256 of
//     those bytes, so its size is a multiple of 512 plus 32. The key space
//     is the sim's own: a key per member whose etcd started, so the
//     cluster's revision (EtcdCluster.Revision; etcd starts at 1) counts
//     them. Every member of a cluster streams the same bytes
//     (Fleet.EtcdSnapshotFile). talosctl etcd snapshot saves it and its
//     etcdutl Status reads the revision and keys (talosctl_snapshot_test.go).
//     Faults: EtcdSnapshotCorrupt flips a bit inside the newest key's value
//     (bbolt and Status do not notice, the hash does); EtcdSnapshotCutAt
//     ends the stream early with status OK, as the Chunker does when its
//     read from etcd fails; EtcdSnapshotData streams given bytes instead
//     (a control plane broken or hostile past what the hash shows; machined
//     copies whatever its etcd client reads, v1alpha1_server.go
//     EtcdSnapshot); bytes given that way that bbolt reads are remembered
//     as streamed, so a recovery from them restores their revision (the
//     newest key of the key bucket, as etcdutl's Status reads it) with the
//     sim's own key space (etcd_snapshot_data.go). devata reads the sim's database back with
//     go.etcd.io/bbolt itself (talosapi/backup_test.go), so the hand-made
//     file is proven a bbolt file.
//   - EtcdRecover (etcd_recover.go; v1alpha1_server.go EtcdRecover,
//     services/etcd.go recoverFromSnapshot; talosctl's cmd/talosctl/cmd/
//     talos/bootstrap.go, machinery client.go EtcdRecover): FailedPrecondition
//     "etcd service is not ready for recovery yet" for CRIStartDelay after a
//     boot (/var not mounted), Unimplemented on a worker and in maintenance
//     mode; the upload's bytes become the recovery file, which Bootstrap
//     with recover_etcd restores into a new single-member cluster with new
//     member IDs (a snapshot the sim did not stream, a failed sha256 check
//     or no upload fail the etcd service). talosctl bootstrap --recover-from
//     sends `nodes`, so its errors come back in the reply as above
//     (talosctl_recover_test.go).
//   - A failed recovery leaves data (etcd_recover.go recoverEtcd,
//     restorable; etcdutl v3.6.4 and v3.7.1 snapshot/v3_snapshot.go Restore
//     and copyAndVerifyDB, which copy the snapshot to member/snap/db and
//     only then check the appended sha256; Talos v1.11.0 and v1.14.1
//     services/etcd.go recoverFromSnapshot, whose error fails the PreFunc:
//     "Failed to run pre stage: error recovering from the snapshot: …",
//     no restart). A snapshot the status step cannot read (none uploaded,
//     one the sim did not stream: "error verifying snapshot") writes
//     nothing; a hash that does not match ("expected sha256 [..], got
//     [..]", etcdutl's %v of the bytes) or a missing one without
//     recover_skip_hash_check leaves the data directory non-empty: Bootstrap
//     answers AlreadyExists "etcd data directory is not empty"
//     (v1alpha1_server.go Bootstrap reads the directory first), and on
//     every later boot the data directory is not empty, so the PreFunc
//     neither joins nor waits and etcd exits on a database without the WAL
//     etcdutl writes after the check: the service is Failed "going to
//     restart forever" (approximation: which of etcd's bootstrap checks it
//     fails is not modelled). Only a reset that wipes EPHEMERAL clears it,
//     the uploaded /var/lib/etcd.snapshot with it (reset.go).
//     Faults.EtcdRecoverCorrupt flips a bit of the database EtcdRecover
//     writes (a failing disk), so a snapshot devata verified still fails
//     there (TestEtcdRecover, cmd/devata TestBootstrapRecoverFromFailedRestore).
//   - The join timeout and the failed boot (etcd_join.go; Talos v1.11.0 and
//     v1.14.1 services/etcd.go buildInitialCluster: retry.Constant for
//     constants.EtcdJoinTimeout, 30 min; system/service_runner.go and
//     system.go Start: a PreFunc error fails the service, capitalised, not
//     restarted; v1alpha1_sequencer_tasks.go StartAllServices waits
//     constants.BootTimeout, 70 min, for every service; main.go handle:
//     revertBootloader, then the reboot). A control plane still waiting to
//     join after Options.EtcdJoinTimeout has etcd Failed "Failed to run pre
//     stage: failed to build initial etcd cluster: failed to build cluster
//     arguments: timeout" (go-retry's TimeoutError) and stays booting; a
//     boot not done after Options.BootTimeout reboots the machine, and its
//     etcd waits in Preparing again. Bootstrap on a node whose join failed
//     is taken (BootstrapEtcd replaces the service). Both default to
//     Talos' times; tests scale them (TestEtcdJoinTimeout).
//   - Preparing on every boot (etcd_join.go armBootTimers,
//     snapshot.etcdPreparing; Talos v1.11.0 services/etcd.go PreFunc:
//     image.Pull WithSkipIfAlreadyPulled, the args, waitPKI): a control
//     plane that holds etcd data shows its etcd service Preparing "Running
//     pre state" for Options.EtcdPrepareDelay after each boot, exactly as a
//     control plane without data shows it, and its etcd does not run
//     meanwhile (no member list, not counted for quorum). What tells them
//     apart is the data directory: List (etcd_datadir.go; v1alpha1_server.go
//     List, pkg/archiver walker.go) serves /var/lib/etcd, one level: "member"
//     while the node holds data or what a failed restore wrote, nothing
//     otherwise; on a worker the Lstat fails; any other root is
//     Unimplemented (not modelled). Roles as machined's rules (os:reader
//     may) (TestEtcdPreparingOnEveryBoot).
//   - Read (read.go; v1alpha1_server.go Read in v1.11.0 and v1.14.1 alike;
//     talosctl read): os.Stat of the path (machined runs in /, so a
//     relative path is read from there), NotFound with os.Stat's text for
//     a path that is not there, "path must be a regular file" (code
//     Unknown) for a directory, then the file in common.Data messages of
//     1024 bytes (pkg/chunker/stream). os:admin only (services/machined.go
//     rules); Unimplemented in maintenance mode. The sim has no
//     filesystem: it serves the files whose content it knows,
//     /etc/os-release (machinery's version.OSReleaseFor for the release it
//     runs), /proc/sys/kernel/random/boot_id (a version 4 UUID, new at
//     every boot, the one its kubelet posts as the Node's
//     status.nodeInfo.bootID: kubelet nodestatus MachineInfo) and
//     /system/state/config.yaml (the config saved on STATE,
//     constants.StateMountPoint and ConfigFilename), and answers every
//     other path NotFound; the directories above those files are
//     directories (TestReadServesTheFilesTalosHas).
//   - One learner at a time (etcd.go joinEtcd; etcd v3.6
//     server/etcdserver/api/membership/cluster.go ValidateConfigurationChange
//     and ValidateMaxLearnerConfig with --max-learners 1, Talos' addMember
//     retried by buildInitialCluster every 3s): a control plane joining
//     while another member is a learner is not added ("etcdserver: too many
//     learner members in cluster") and tries again after the join delay
//     (TestEtcdOneLearnerAtATime). A learner answers as etcd does (see
//     etcd membership above). Approximations: EtcdMemberList without
//     QueryLocal, whose client Talos points at every control plane's
//     etcd, answers from the target's own etcd (Talos' balancer may reach
//     the learner and fail); a learner's /var/lib/etcd lists empty and it
//     streams no snapshot (etcd serves a learner Snapshot).
//   - Stage and readiness (node.go; machine_status.go and
//     v1alpha1_sequencer_tasks.go StartAllServices): a configured machine is
//     booting until every service of its boot is up (running, and healthy
//     where it has a health check), then running until it reboots. A control
//     plane therefore stays booting until its etcd runs; a kubelet unhealthy
//     from the boot on keeps a machine booting. MachineStatus.ready follows
//     machined's checks in its order and words: services (each running
//     service healthy; apid, machined, kubelet, and etcd and trustd on
//     control planes, running: "etcd not running"), and nodeReady (`node "x"
//     status is not available yet` until the kubelet registered its Node,
//     `node "x" is not ready` while it is NotReady). The time and network
//     checks always pass; staticPods reads the StaticPodStatus resources:
//     "kube-system/<pod> not ready" while one restarts.
//   - Restarts after a live change (restart.go, restart_inputs.go;
//     v1.14.1 kubelet_service.go KubeletServiceController.Run,
//     control_plane_static_pod.go ControlPlaneStaticPodController): a
//     change of what the controllers derive from the config, not of its
//     text, restarts. A change of the KubeletConfig (kubelet_config.go:
//     image, extraArgs, extraMounts, clusterDNS, …), the node name and node
//     IP subnets KubeletSpec adds (kubelet_spec.go) or the kubelet secrets
//     (secrets/kubelet.go) stops and starts the kubelet (service
//     Preparing, "kubelet not running", no Node posts; the new
//     kubeletVersion shows once it posts again), and a change of a static
//     pod's config resource (control_plane.go: APIServerConfig, with the
//     admission, audit, authentication and authorization files,
//     ControllerManagerConfig, SchedulerConfig) or of the Kubernetes
//     secrets (secrets/root.go) replaces that static pod (Running, not
//     Ready, with the new image). The same settings moved from the
//     v1alpha1 document into 1.14's documents derive the same resources
//     and restart nothing (COSI writes no unchanged resource: state/wrap.go
//     UpdateWithConflicts). Approximations: KubeletSpec is compared through
//     the KubeletConfig it renders (empty and absent maps read alike, as
//     KubeletSpecController renders them); the secrets compared are the
//     config's roots, not the certificates machined issues from them and
//     the node's addresses. Both begin a quarter of RestartDelay
//     after the apply (until then the old image runs, ready) and last
//     RestartDelay. The sim's one kube-apiserver stays up meanwhile, where
//     on Talos requests to that node's API server fail: clients must not
//     depend on a particular API server answering.
//   - Kubelets post their Node only once an etcd cluster exists (the API
//     server is a static pod that needs etcd). Each round (RunKubelets'
//     interval, 2 s in devata sim) the sim's kubelets run eight machines
//     at a time (kubeletWorkers), each machine's requests in order; each
//     reads its Node and, on the kubelet's clock (Kubernetes v1.37.2
//     kubelet_node_status.go tryUpdateNodeStatus, nodeStatusHasChanged;
//     kubelet.go nodeLeaseRenewIntervalFraction), posts its status only
//     when it changed (heartbeat times aside) or 5 minutes after its last
//     report, and renews its Lease every 10 s (a quarter of its 40 s).
//     A real kubelet checks every 10 s (nodeStatusUpdateFrequency), the
//     sim every round: changes show sooner. A control plane whose etcd
//     service is healthy runs kube-apiserver, kube-controller-manager and
//     kube-scheduler as static pods (control_plane_static_pod.go): COSI
//     StaticPodStatus `kube-system/<name>-<node>`, and mirror pods with
//     k8s-app=<name>, tier=control-plane. With the API server up the sim
//     plays Talos' bootstrap manifests and the controllers behind them
//     (addons.go): CoreDNS (Deployment k8s-app=kube-dns, 2 replicas, Ready
//     only on a node with a CNI; the kube-dns Service of k8stemplates/
//     coredns.go CoreDNSService and the EndpointSlice kube-controller-
//     manager would keep, an endpoint per pod ready as the pod is; the
//     ClusterIP is Talos' pinned tenth address of the service subnet,
//     which the test bed API server's service range must hold, as devata
//     sim's and the demo's does (their range is the inventory's service
//     subnets, control_plane_final.go): a range that refuses it leaves
//     kube-dns absent, as below) and, unless cluster.proxy.disabled,
//     kube-proxy (DaemonSet k8s-app=kube-proxy, a host-network pod per
//     node). The pods run the images of the Deployment's and DaemonSet's
//     templates, whoever set them. KubePrismStatuses lists
//     127.0.0.1:<port> (kubeprism_config.go) and is healthy only while an
//     API server can run (kubeprism.go writeKubePrismStatus).
//   - Membership (etcd_remove.go): EtcdRemoveMemberByID and
//     EtcdLeaveCluster (v1alpha1_server.go; Unimplemented "etcd remove
//     member / etcd leave is only available on control plane nodes" on a
//     worker) reach the cluster through the control planes' endpoints
//     (NewClientFromControlPlaneIPs), so the node itself need not run etcd.
//     The removal is etcd's MemberRemove behind WithRequireLeader and its
//     strict reconfiguration check (server.go mayRemoveMember,
//     cluster.go IsReadyToRemoveVotingMember): "etcdserver: no leader"
//     without quorum (after etcd's 1s election timeout), NotFound "member
//     not found" (EtcdRemoveMemberByID maps it; leave takes it as done), a
//     voting member only while the members that stay hold a quorum of
//     started ones ("not enough started members": never the last), a down
//     member always, a running one only while the healthy members less it
//     are a quorum ("etcdserver: unhealthy cluster"); etcd's errors carry
//     no gRPC status, so they reach the caller as code Unknown. A running
//     member removed by another node keeps its data and fails for ever
//     (service Failed). Leave is etcd.go Client.LeaveCluster: the local
//     member ID (GetLocalMemberID waits up to 3 minutes on a node whose
//     etcd never ran), the removal retried every 10s for 5 minutes while
//     unhealthy, then etcd stopped (service Finished until the next boot,
//     after which a control plane without data joins again) and its data
//     deleted.
//   - Reset (reset.go; v1alpha1_server.go Reset, v1alpha1_sequencer.go
//     Reset): input checks first (UserDisksToWipe with SYSTEM_DISK, an
//     unknown or system device, SystemPartitionsToWipe with USER_DISKS or
//     an unknown label: plain errors, code Unknown), then the ack with an
//     actor ID and the sequence in the background: not while an upgrade
//     runs ("reset failed: locked", logged); graceful on a control plane
//     with etcd data, LeaveEtcd as above, whose failure ends the sequence
//     with the machine unchanged; the STATE (config) and EPHEMERAL (etcd
//     data) partitions wiped (SYSTEM_DISK, ALL, or the partitions named);
//     then a reboot into maintenance mode (the boot medium has no config),
//     or, with Reboot false, a halt until Machine.PowerOn. A non-graceful
//     reset leaves its etcd member in the list, as on Talos. The sim does
//     not serve Reset in maintenance mode (Talos' maintenance service does,
//     to SideroLink peers only). The sim's kubelets finish pods with a
//     deletionTimestamp on nodes whose kubelet runs (the status manager's
//     final Delete with grace 0 and a UID precondition); on a node that is
//     down they stay Terminating (envtest runs no pod garbage collector).
//   - Upgrade (upgrade.go, upgrade_etcd.go; v1alpha1_server.go Upgrade):
//     os:admin only (services/machined.go rules); on a node without config
//     Unimplemented "API is not implemented in maintenance mode"
//     (maintenance/server.go Upgrade: assertAdminRole, and only SideroLink
//     peers are os:admin there). From Talos 1.13 a machine whose system
//     disk holds no install is refused first: FailedPrecondition "Talos is
//     not installed" (v1.13.9 and v1.14.1 v1alpha1_server.go Upgrade;
//     only reachable through a test's Machine.SetInstalled, as on Talos a
//     configured machine is installed). The installer image is pulled as
//     install.PullAndValidateInstallerImage and image.Pull do, into the
//     system containerd's system namespace: it must parse as
//     reference.ParseDockerRef reads it (imageref.go), and the sim's
//     registry must hold it (containerd.go resolve): an installer for
//     every Talos version tag (vX.Y.Z, pre-releases included) of every
//     repository, which is the version the node then boots, but none of
//     ghcr.io/siderolabs/installer from 1.14 on (Talos publishes 1.14's
//     installers on the Image Factory only: talos #13138, pkg/images in
//     v1.14.1, internal/talos GHCRInstaller); by digest only the digest
//     of its tag (a bare digest never). Any other tag, a ghcr.io 1.14
//     installer, a bare digest and Faults.UpgradeImagesMissing are not
//     found, retried once (WithMaxNotFoundRetries; Talos 1.14's
//     PullWithRetriesAndTimeout retries five times) and answered as
//     go-retry's error set: "error validating installer image %q: 1
//     error(s) occurred:\n\tfailed to pull image ...: failed to resolve
//     reference ...: ...: not found", code Unknown (a plain error through
//     machined's gRPC server). The pull takes the machine's installer pull
//     delay (Options.InstallerPullDelay, default 100ms;
//     Faults.InstallerPullDelay per machine) inside the call, under the
//     caller's context, as install/pull.go PullAndValidateInstallerImage
//     pulls and runs `installer --help` before the handler goes on (pull.go):
//     a caller whose deadline passes first reads DeadlineExceeded (or,
//     when the reply wins the race, machined's "error validating installer
//     image %q: 1 error(s) occurred:\n\ttimeout", Unknown: go-retry's
//     TimeoutError), and nothing starts, then or later; nothing is kept,
//     so the next call pulls again. An image the system containerd
//     already holds (a pull that ended, this boot) is not pulled again
//     (WithSkipIfAlreadyPulled). On a control plane (init or controlplane)
//     unless forced (or, from Talos 1.13, preserved: v1alpha1_server.go
//     Upgrade in v1.13.9 and v1.14.1): an etcd client from the control
//     planes' endpoints (NewClientFromControlPlaneIPs: "failed to create
//     etcd client: no controlplane endpoints discovered yet" before any etcd
//     cluster, the admin certificate error for CRIStartDelay after a boot),
//     the upgrade mutex (tryLockUpgradeMutex: without quorum its session
//     waits as an etcd client does and fails DeadlineExceeded; held by
//     another call's checks, "failed to acquire upgrade mutex: error trying
//     to lock etcd upgrade mutex: mutex: Locked by another session" at
//     once), then internal/pkg/etcd ValidateForUpgrade over the member
//     list: exactly two members are refused ("etcd member count(2) is insufficient to
//     maintain quorum if upgrade commences"), a member without a name
//     "is not started", a member that is down, Unreachable or has its etcd
//     stopped "is not healthy ...: context deadline exceeded" after the
//     client's wait (DeadlineExceeded: a wrapped context error keeps its
//     code). Each member's check takes its Latency, and the mutex is held
//     only while the checks run: once the first call replied, a second
//     control plane's Upgrade is not refused while the first still drains.
//     The reply is UpgradeResponse{Ack: "Upgrade request received",
//     ActorId: a UUID}. Downgrades are not refused: the handler compares
//     no versions.
//   - The upgrade sequence (v1alpha1_sequencer.go Upgrade) runs after the
//     reply for Options.UpgradeDelay: MachineStatus stage upgrading and
//     ready (machine_status.go getReadinessChecks has no checks in that
//     stage), the Node cordoned (node_cordoned_spec.go, node_apply.go
//     ApplyCordoned, annotation talos.dev/cordoned); the first half drains
//     (CordonAndDrainNode, skipped with kubelet.skipNodeRegistration), the
//     second runs with cri, kubelet, etcd and trustd Finished, health
//     "service not running" (StopServicesEphemeral), so the node's own etcd
//     calls wait as without etcd and other control planes find it
//     unhealthy. The upgrade does not leave etcd. Then the node reboots
//     (RebootDelay) into the new version with its config and etcd data,
//     rejoins etcd as after any reboot and is uncordoned. Version,
//     runtime.Version (VersionController), Member resources and the Node's
//     osImage report the version it runs; Observation the version, the
//     installer image that wrote its partition, the version the next boot
//     loads and whether it upgrades.
//     A Reboot while the sequence runs is acked and does nothing
//     (sequencer.go CanTakeOver: nothing takes over an upgrade); a second
//     Upgrade is acked too and does not start. Staged (StageUpgrade): the
//     node reboots at once, and the next boot's install sequence
//     (v1alpha1_state.go probeMeta, Install with IsInstallStaged) runs the
//     installer for UpgradeDelay and reboots again into the new version.
//     Reboot modes (default kexec, powercycle) only change Talos' timing,
//     and the sim's is the same.
//   - A/B fallback (Faults.UpgradeBootFails): the new version comes up,
//     booting and not ready, without the services its boot sequence would
//     start, and after RebootDelay that sequence fails; machined then
//     reverts the bootloader to the partition the Upgrade META tag names
//     and reboots (main.go handle, revert.go revertBootloadInternal, grub
//     Config.Revert), and the node comes back on the version it ran before.
//   - ImageService.Pull and LifecycleService (images.go, lifecycle.go,
//     containerd.go), from Talos 1.13 (below, a machine answers as a Talos
//     without them: Unimplemented "unknown service machine.ImageService",
//     "unknown service machine.LifecycleService", from gRPC itself, so
//     before authorization and in maintenance mode too). Both first
//     resolve the request's ContainerdInstance as ctrhelper
//     ContainerdInstanceHelper does (InvalidArgument "invalid containerd
//     driver …", "invalid containerd namespace …" — NS_UNKNOWN, and in
//     1.13 "3" for NS_TALOSCONTAINERS, which its enum lacks —, "cannot
//     use CRI namespace with containerd driver"); a store is the
//     instance's socket (1.13: the containerd driver is the system
//     containerd; 1.14: only with NS_SYSTEM, else the CRI one; the CRI
//     driver is always the CRI one) and the namespace. talosctl v1.14.1
//     sends --namespace system as {CRI, NS_SYSTEM}, inmem as {CONTAINERD,
//     NS_SYSTEM}, cri as {CRI, NS_CRI}. The system containerd's stores
//     are lost at every boot (a tmpfs), the CRI containerd's when
//     EPHEMERAL is wiped.
//     Pull (images.go Service.Pull; os:admin and os:operator): an image
//     the store holds under its normalized name is not pulled again
//     (WithSkipIfAlreadyPulled: no progress); any other is resolved in the
//     registry as the legacy Upgrade's pull is (above), takes the
//     installer pull delay under the caller's context, streaming both
//     layers downloading every 100ms meanwhile (progress/pull_progress.go
//     ShowProgress), then each layer's download complete, extracting and
//     extract complete (the layer ID the first 12 hex digits of its
//     digest), and is stored under the reference, its digest and
//     repository@digest (aliases.go manageAliases). A caller whose
//     deadline passes first reads DeadlineExceeded (1.14's single attempt
//     wraps the context's error; 1.13's retry answers go-retry's "1
//     error(s) occurred:\n\ttimeout", Unknown, should its reply win the
//     race) and nothing is stored: LifecycleService.Upgrade then finds no
//     installer. A cancelled pull keeps no layer here; containerd keeps
//     those it completed until its garbage collector runs. The last message is
//     the name, repository@sha256:… unless the reference had a digest. A
//     reference that does not parse is a plain error (Unknown "failed to
//     parse image reference …"); an image the registry lacks NotFound
//     "error pulling image: failed to pull image %q: failed to resolve
//     reference %q: %s: not found", in 1.13 inside go-retry's "1 error(s)
//     occurred:\n\t…" (its Pull still retried).
//     LifecycleService.Upgrade (lifecycle.go Service.Upgrade; os:admin),
//     in its order: the service's lock (FailedPrecondition "another
//     installation/upgrade is already in progress"; machined's, so a
//     reboot frees it), an install on the system disk (FailedPrecondition
//     "machine is not installed"), an image name (InvalidArgument
//     "installer image name is required"), then runInstallerContainer's
//     errors as Internal "upgrade failed: …": the containerd instance
//     ("upgrade failed: rpc error: code = InvalidArgument desc = …") and
//     the image in that store by the exact name given ("installer image
//     %q not found in containerd store: image %q: not found", containerd's
//     GetImage through errgrpc). Then the installer of that image runs
//     (container.go) and its output streams: Go log lines "running Talos
//     installer <v>", "running pre-flight checks", "host Talos version:
//     <host>", "all pre-flight checks successful", "installation of <v>
//     complete" (cmd/installer install.go, preflight.go), one line per
//     message with its newline (1.14 output.Stream; 1.13 streamOutput's
//     512-byte reads, one write each), then one exit_code message, and
//     the call ends OK whatever the code. The pre-flight check is
//     compatibility's UpgradeableFrom for the installer's version from the
//     machine's (machinery v1.14.1's data; an installer past 1.14 passes):
//     when it fails the last line is "pre-flight checks failed: host
//     version … is too old to upgrade to Talos …" (or "too new to
//     downgrade"), the exit code 4 for a 1.14 installer (pkg/installer/
//     exitcode ExitEnvironment), 1 for an older one, and nothing is
//     written. Otherwise the installer runs for half the UpgradeDelay and
//     writes the other boot partition: the next boot loads it
//     (Observation.NextVersion), with the A/B fallback above, but nothing
//     else happens: no drain, no etcd check, no reboot; a reboot while it
//     runs kills it and writes nothing. The client reboots with
//     MachineService.Reboot. Install (os:admin): the lock, AlreadyExists
//     "machine is already installed" (every configured machine is),
//     "installer image name is required", InvalidArgument "destination
//     disk is required", "invalid disk path: lstat <disk>: no such file or
//     directory" for a disk the node does not have, then the installer in
//     install mode (no pre-flight check; Internal "installation failed:
//     …"). Neither reply carries common.Metadata; `nodes` is refused by a
//     1.13 endpoint (above). In 1.13's maintenance mode the caller is
//     os:reader (authz.Injector ReadOnlyWithAdminOnSiderolink): Pull,
//     Upgrade and Install are PermissionDenied "not authorized". Calls
//     counts them as "ImageService.Pull", "LifecycleService.Upgrade",
//     "LifecycleService.Install" (and "Upgrade" as MachineService's too).
//   - Machines given a config at Start have been up a minute: their CRI is
//     up and their etcd certificates exist; a reboot starts the clock again.
//   - Other calls: Version (machinery's version reply with the machine's tag),
//     ServiceList (apid, containerd, cri, kubelet, machined, …, etcd and
//     trustd on control planes; etcd stays Preparing until the node has etcd
//     data; events carry boot timestamps), Mounts (the mount source is a
//     device), Kubeconfig (a .tar.gz chunk with an admin kubeconfig from the
//     config's Kubernetes CA), Reboot.
//   - COSI: a state per machine over cosi-project/runtime's in-memory store,
//     with the namespaces and resource definitions machined registers (one
//     shared `meta` namespace for the whole process), behind machined's
//     access policy: reads only, known types and namespaces only, Sensitive
//     types (MachineConfig) for os:admin only. Resources follow the machine's
//     state: MachineConfig `v1alpha1` and `persistent`, MachineStatus,
//     Service, NodeAddress, Version, KubeletSpec (extraMounts from the config),
//     KubePrismStatuses (when KubePrism is on) and, on control
//     planes with etcd data, ManifestStatus (10-kube-proxy unless
//     cluster.proxy.disabled).
//
// # Bootstrap manifests
//
// A configured control plane serves the Manifest resources
// (Manifests.kubernetes.talos.dev, namespace controlplane, not Sensitive)
// that v1.14.1's ControlPlaneBootstrapManifestsController
// (controllers/k8s/control_plane.go) and ManifestController
// (controllers/k8s/manifest.go render, templates in
// controllers/k8s/internal/k8stemplates) render from its config
// (manifests.go, manifests_bootstrap.go), every one Talos renders:
// 00-kubelet-bootstrapping-token (the Secret bootstrap-token-<id> of
// cluster.token, in stringData, kubelet.go), 01-csr-node-bootstrap,
// 01-csr-approver-role-binding and 01-csr-renewal-role-binding (csr.go),
// 11-kube-config-in-cluster (KubePrism's address when it is on, else the
// cluster endpoint, kubeconfig.go), 11-talos-node-rbac-template
// (system:talos-nodes, talos.go); 05-flannel when the config's CNI is
// flannel, Talos' default (ClusterRole, ClusterRoleBinding,
// ServiceAccount, kube-flannel-cfg, the kube-flannel DaemonSet with the
// flannel image of the Talos the machine reports, flannel.go);
// 10-kube-proxy when the config enables kube-proxy (DaemonSet with
// manageProxyConfigArgs' flags, ServiceAccount, ClusterRoleBinding
// system:node-proxier); 11-core-dns (ServiceAccount, ClusterRole and
// ClusterRoleBinding system:coredns, the Corefile ConfigMap, the
// Deployment) and 11-core-dns-svc (kube-dns, ClusterIP the tenth address
// of the service subnet, k8s.DNSServiceAddrs) when CoreDNS is enabled;
// 13-talos-service-account-crd (serviceaccounts.talos.dev, crds.go) when
// machine.features.kubernetesTalosAPIAccess is enabled; and each inline
// manifest as 99-<name> (ExtraManifestController, extra_manifest.go, and
// SetYAML: comment-only documents skipped, Lists unwrapped). ManifestStatus
// names exactly these. The objects equal Talos' own template goldens for
// the same inputs (manifests_golden_test.go). CoreDNS's image is the
// config's or, when it names none, the default of the Talos the machine
// reports (constants DefaultCoreDNSVersion: v1.12.2 in v1.11.0, v1.13.2 in
// v1.12.4, v1.14.6 in v1.13.9, v1.14.7 in v1.14.1); kube-proxy's follows
// the config's cluster.proxy.image, so it moves with a Kubernetes version
// change. With an API server the sim plays ManifestApplyController
// (controllers/k8s/manifest_apply.go apply, manifests_apply.go): in
// Talos' order (the manifests by ID, then Namespaces first and CRDs
// next, each by name, the rest as listed: its sort.SliceStable), every
// object the inventory ConfigMap kube-system/talos-bootstrap-manifests-
// inventory does not list is created with server-side apply, field
// manager "talos", annotation config.k8s.io/owning-inventory, and listed
// (kinds without a typed client, the Secret, the CRD and inline
// manifests' kinds, through discovery's REST paths, as Talos' REST mapper
// finds them); listed objects are never applied again, so a later config
// (a new Kubernetes version, a new Talos) changes the Manifest resources
// and not the cluster until talosctl upgrade-k8s, or devata after a
// Kubernetes upgrade, syncs them. An object the API server refuses
// (Invalid: the kube-dns Service when its --service-cluster-ip-range does
// not hold the pinned ClusterIP) is left out, nothing picks another
// address, the others are applied and listed, and the controller fails
// (apply, applyManifests: the error "error creating /v1/Service/kube-dns:
// …"; Run returns it before its ManifestStatus write; cosi-project/runtime
// rruntime run.go logs "controller failed" and runs it again after a
// backoff): the sim logs the failure (Warn, "controller failed", once per
// distinct error), applies again every kubelet round, and serves no
// ManifestStatus on any control plane while the apply fails and none
// succeeded before (Talos keeps what an earlier successful run wrote, per
// node). cluster.extraManifests are downloaded with
// cluster.extraManifestHeaders as ExtraManifestController does
// (manifests_extra.go): the Manifest "99-<URL>" once the GET answered 2xx,
// none while it fails (tried again a second later), fetched once per boot
// and config. Approximations: the external cloud provider's manifests
// (30-<url>) are not served; an inline manifest that is not valid YAML
// is left out, as Talos leaves it out (extra_manifest.go: SetYAML fails,
// the resource is not written, the others are, and the controller fails
// and runs again), except that Talos keeps the Manifest an earlier valid
// version wrote where the sim drops it; the sim
// runs no flannel pods and sets no status on its DaemonSet (a sync that
// changed it would wait for a rollout the sim never plays); the objects
// take v1.14.1's shape whatever the machine's release (v1.11.0 renders the
// same manifests and kinds; details and images differ, and the images
// follow the machine's release); kube-proxy's
// extra args and config-file mode, and CoreDNS's and kube-proxy's
// resource overrides, are not rendered (flannel's are).
//
// # talosctl health
//
// The real talosctl v1.11.0 runs `talosctl health --server=false` against
// the fleet and passes every check of pkg/cluster/check/default.go
// (talosctl_health_test.go): the Talos ones, then the Kubernetes ones with
// the kubeconfig its Kubeconfig call returns, against a real kube-apiserver
// that serves and trusts the bundle's Kubernetes CA (testenv
// Options.ClusterCA), reached with --k8s-endpoint because the cluster
// endpoint is not on this machine. Each machine needs an address of its
// own (devata sim --inventory-addresses on loopback addresses, or simtest
// LoopbackNet), since the checks match Nodes to machines by InternalIP.
// The server-side variant (--server, ClusterService.HealthCheck) is not
// served.
//
// # talosctl v1.14.1
//
// The real talosctl v1.14.1 works against a fleet on Talos v1.14.1
// (talosctl114_test.go): version through apid's fan-out, get (Version,
// Members from 1.14's discovery documents, MachineStatus, Service,
// StaticPodStatus, MachineConfig, SystemDisk, Disk, VolumeStatus, the
// ResourceDefinitions), service, mounts, etcd members, bootstrap,
// kubeconfig, apply-config --dry-run, and upgrade through ImageService.Pull
// and LifecycleService.Upgrade, then Reboot (with --drain=false
// --wait=false), time, etcd alarm list, image list (--namespace system
// too) and containers (-k too: imagelist.go). Not served, each
// Unimplemented: MachineService.Read, which upgrade and reboot need to
// --wait.
//
// The real talosctl v1.13.9 (built with go-kubernetes v0.2.36,
// containerd/v2 v2.2.3 and the go.etcd.io/etcd modules at v3.6.6 in place
// of Talos' unserved pins, internal/testenv/build/talosctl-v1.13.9) works
// against a fleet on Talos v1.13.9 (talosctl113_test.go): version through
// apid's fan-out, get machineconfig (1.13's contract: HostnameConfig, no
// KubeletConfig), get extensions, etcd members, apply-config --dry-run and
// upgrade through ImageService.Pull and LifecycleService.Upgrade, then
// Reboot.
//
// # TimeService, etcd alarms and etcd versions
//
//   - TimeService (timeapi.go; v1.11.0, v1.13.9 and v1.14.1
//     v1alpha1_time.go TimeServer.Time and TimeCheck, unchanged across
//     them): Time asks the first server of the config's
//     NetworkTimeSyncConfig, else constants.DefaultNTPServer
//     (time.cloudflare.com); TimeCheck the one given, InvalidArgument "ntp
//     server is required" without; any role (services/machined.go rules).
//     The sim asks no NTP server: the remote time is the machine's own
//     (its clocks are in sync; a server that does not answer, "error
//     querying NTP server", is not modelled). In maintenance mode below
//     1.13 the service does not exist (v1.11.0 maintenance_service.go Run
//     registers only the maintenance MachineService and COSI: "unknown
//     service time.TimeService"); from 1.13 maintenance mode is machined's
//     own API (v1.13.9 v1alpha1_server.go Register; internal/app/maintenance
//     is gone) and Time answers os:reader with the default server.
//   - EtcdAlarmList (api.go; v1alpha1_server.go EtcdAlarmList and
//     mapAlarms, unchanged from v1.11.0 to v1.14.1): Unimplemented "etcd
//     alarm list is only available on control plane nodes" on a worker;
//     "failed to create etcd client: …" or "failed to list etcd alarms: …"
//     where etcd does not run; otherwise one message with the member's
//     alarms, which the sim never raises (no NOSPACE quota, no CORRUPT
//     check): talosctl prints nothing, not even its header.
//   - EtcdStatus's versions (etcdversion.go): ProtocolVersion is the etcd
//     the machine's release runs, constants.DefaultEtcdVersion of each tag
//     (3.6.4 in v1.11.0, 3.6.7 in v1.12.x, 3.6.9 in v1.13.0, 3.6.12 in
//     v1.13.9, 3.7.1 in v1.14.1; the image moved from
//     gcr.io/etcd-development/etcd to registry.k8s.io/etcd in 1.12), or the
//     tag of the config's cluster.etcd.image; StorageVersion the cluster
//     version etcd migrates its storage to (etcd v3.7.1
//     etcdserver/version/monitor.go, adapters.go UpdateStorageVersion), the
//     lowest major.minor of the members: 3.6.0 while any member runs 3.6.
//     Talos passes both on (v1alpha1_server.go EtcdStatus); a learner
//     reports the same. An etcd snapshot (etcd_snapshot.go etcdBuckets)
//     holds that storage version in its meta bucket and the same cluster
//     version in its cluster bucket (etcd v3.7.1 schema/version.go
//     UnsafeSetStorageVersion, schema/membership.go
//     MustSaveClusterVersionToBackend: major.minor.0): "3.7.0" from a
//     cluster whose members all run Talos 1.14's etcd, "3.6.0" otherwise;
//     the buckets are the same in 3.6 and 3.7 (schema/bucket.go
//     AllBuckets).
//
// # Images, containers and the resource types of 1.14
//
//   - image list and containers (imagelist.go) as Talos v1.14.1 answers
//     them: ImageService.List (internal/app/images/images.go Service.List,
//     from 1.13), the deprecated MachineService.ImageList
//     (v1alpha1_images.go ImageList, every release; talosctl falls back to
//     it where ImageService is unknown) and MachineService.Containers
//     (v1alpha1_server.go Containers and getContainerInspector; the
//     containerd inspector internal/pkg/containers/containerd
//     containerInfo, the CRI's internal/pkg/containers/cri buildPod and
//     buildContainer), os:reader and up (services/machined.go rules). The
//     stores hold what the machine pulled and what it runs: the kubelet
//     and etcd images in the CRI containerd's system namespace
//     (services/kubelet.go, etcd.go: the runner's default address
//     constants.CRIContainerdAddress), the static pods' and the sandbox
//     image (pkg/images DefaultSandboxImage: pause 3.10, 3.10.1, 3.10.2 in
//     v1.11.0, v1.13.9, v1.14.1) in k8s.io. Containers: apid and, on
//     control planes, trustd in the system containerd
//     (WithContainerdAddress(SystemContainerdAddress), no image), each
//     static pod's sandbox and container through the CRI. Kinder than
//     Talos: images have no size but the installers', and Kubernetes'
//     own workloads (CoreDNS, kube-proxy, the CNI) are not listed.
//   - Resource types newer than 1.11 that talosctl reads (rdversions.go
//     typesSince, localresources.go): of the 200 types v1.14.1 registers
//     and v1.13.9's 165, the sim serves ImageFactorySchematic,
//     UnattendedInstallStatus (unattended.go), KubeletStatus (controllers/k8s/kubelet_status.go
//     KubeletStatusController: the KubeletSpec's image; talosctl's
//     dashboard reads it, internal/pkg/dashboard/resourcedata) and
//     NTPStatus (controllers/time/sync.go SyncController: the spike
//     filter; never a spike in the sim) from 1.14 only, as v1.14.1's
//     v1alpha2_state.go NewState registers them and v1.13.9's does not;
//     on an older machine their definitions are not listed and a read is
//     refused as machined's access policy refuses an unregistered type.
//
// # Maintenance mode from 1.13
//
// Up to 1.12 a machine without config serves its own gRPC server (v1.11.0
// and v1.12.0 controllers/runtime/maintenance_service.go Run,
// internal/app/maintenance/server.go: MachineService's
// ApplyConfiguration, Version (Unimplemented "API is not implemented in
// maintenance mode" but to os:admin, assertAdminRole), Upgrade, Reset and
// COSI through the resource access policy, its callers os:reader), which
// the sim plays (route.go enter, authz.go maintenanceMethods, apply.go
// applyMaintenance). From 1.13 internal/app/maintenance is gone: apid
// serves machined's whole API and, while the config is incomplete,
// APIServiceConfigController sets ReadonlyRoleMode and NodeRoutingDisabled
// (v1.13.9 controllers/runtime/api_service_config.go), so apid's
// authz.Injector makes every caller os:reader
// (ReadOnlyWithAdminOnSiderolink, pkg/grpc/middleware/authz/injector.go;
// os:admin for a SideroLink peer, which the sim has none of) and routes
// nothing (director.go Director: skipRouting), and machined's rules
// decide per method (services/machined.go). The sim plays it (route.go
// enter, authz.go authorizeMaintenance, servedInMaintenance113):
//
//   - what os:reader may not call is PermissionDenied "not authorized"
//     (Reboot, Bootstrap, Upgrade, Kubeconfig, COSI writes, …);
//     ApplyConfiguration admits os:reader "for maintenance only, verified
//     in the handler";
//   - Version answers every caller, without features while no config is
//     loaded (v1alpha1_server.go Version): devata learns there the release
//     a machine booted (talosapi detectMaintenance), and from the Version
//     resource (controllers/runtime/version.go VersionController, readable
//     by os:reader on every release) where Version is Unimplemented;
//   - ApplyConfiguration as v1alpha1_server.go ApplyConfiguration runs it
//     with inMaintenance (apply.go applyMaintenance113): load, Validate and
//     RuntimeValidate errors are InvalidArgument with their own text (1.12
//     says "failed to parse config: …", code Unknown, and "configuration
//     validation failed: …"); REBOOT becomes NO_REBOOT and AUTO resolves to
//     NO_REBOOT; a dry run answers "Applied configuration without a reboot
//     (skipped in dry-run)" with the diff against no config; NO_REBOOT
//     completes the config, and the boot goes on to install and reboot as
//     the maintenance install does; STAGED persists it for the next boot;
//   - ImageService, LifecycleService and TimeService as on a configured
//     machine, each method by its rule.
//
// Approximations that remain: TRY is played as NO_REBOOT (Talos arms a
// rollback to no config); the other methods os:reader may call
// (ServiceList, Mounts, Memory, Hostname, the etcd reads, …) answer
// Unimplemented "sim: … is not modelled on a machine in maintenance
// mode", never an invented answer; StorageService (Disks, BlockDeviceWipe)
// is not served on any release.
//
// # Talos' API integration suites
//
// Talos v1.11.0's and v1.14.1's own API integration tests
// (internal/integration, the binary Talos' CI runs against a cluster,
// built with go test -c -tags integration,integration_api,integration_k8s
// by internal/testenv TalosAPISuites) run against a fleet of that release
// devata built: `devata sim --maintenance --kubernetes
// --inventory-addresses` on the homelab (v1.11.0) or the v1.14 homelab,
// then `devata bootstrap`, each suite on its own and bounded
// (internal/testenv/talosapi_test.go, build tag talosapi, in .ci/run).
// What they found unlike Talos, and the sim now does as Talos:
//
//   - gRPC messages up to constants.GRPCMaxMessageSize (32 MiB), as apid and
//     machined accept (v1.14.1 apid/service.go and
//     system/services/machined.go; v1.11.0 apid/main.go): an 11 MB config
//     applies and reads back (ApidSuite/TestBigPayload); but below 1.13 a
//     machine in maintenance mode keeps gRPC's 4 MiB default, since its
//     maintenance server is a factory.NewServer without MaxRecvMsgSize
//     (v1.11.0 controllers/runtime/maintenance_service.go Run), and a
//     bigger request fails ResourceExhausted "grpc: received message
//     larger than max" there (route_interceptors.go maintenanceMessageSize);
//   - Version's GoVersion is the Go that built the machine's release
//     (machinery constants.GoVersion of each tag, goversion.go), not the
//     sim's (VersionSuite/TestExpectedVersionMaster);
//   - a SecurityState in the runtime namespace on every machine
//     (controllers/runtime/security_state.go: a metal machine booted
//     without Secure Boot or a UKI, SELinux permissive), which
//     base/api.go Capabilities waits for;
//   - HostnameStatus and the local etcd Member (controllers/etcd/member.go
//     MemberController), which EtcdSuite/TestMembers reads (localresources.go);
//   - the Node's labels, annotations and taints as machined's
//     NodeApplyController sets them (v1.11.0 and v1.14.1
//     controllers/k8s/node_apply.go syncOnce, applyNodeKV, ApplyTaints;
//     the specs from node_label_spec.go, node_annotation_spec.go,
//     node_taint_spec.go Run): Talos owns what it set, recorded in the
//     talos.dev/owned-labels, owned-annotations and owned-taints
//     annotations, and removes what it owns once the config drops it;
//     a control plane's kubelet registers with the NoSchedule taint
//     (kubelet_spec.go RegisterWithTaints) (kubelet_nodeapply.go,
//     TestKubeletOwnsTheLabelsAnnotationsAndTaintsTalosSets;
//     NodeLabelsSuite);
//   - MachineService.Events (v1alpha1_server.go Events, runtime
//     v1alpha1_events.go Watch): the hello event, tails by count, ID and
//     seconds, then new events; the sim's log holds each boot's sequence
//     START and STOP and its services' state changes (events.go,
//     TestEventsTailAndWatch). v1.11.0's suites wait for every node's boot
//     STOP (base/api.go WaitForBootDone) through apid's one-to-many
//     stream, whose targets now stream side by side, as apid's proxy runs
//     its backends, each given the one request (route_interceptors.go streamInterceptor).
//
// Run and expected to pass on both releases: VersionSuite
// (TestExpectedVersionMaster, TestSameVersionCluster), ApidSuite
// (TestBigPayload; TestPKIMismatch on v1.14.1, which v1.11.0 lacks),
// ResourcesSuite (TestListResources, TestForbiddenOperations),
// MachineStatusSuite (TestMachineStatusReady), EtcdSuite (TestMembers),
// ApplyConfigSuite (TestApplyWithoutReboot, TestApplyNoReboot,
// TestApplyDryRun, TestApplyDryRunDocuments, TestApplyTry,
// TestApplyRemovingV1Alpha1), NodeLabelsSuite (TestUpdateControlPlane,
// TestUpdateWorker; TestAllowScheduling on v1.11.0, which v1.14.1
// lacks), EventsSuite (TestEventsWatch); on v1.11.0 NodeAnnotationsSuite
// (TestUpdateControlPlane, TestUpdateWorker; not tried on v1.14.1 yet).
// ServiceAccountSuite (v1.11.0) skips every test with Talos' own reason
// "cluster health can't be verified when cluster state is not provided"
// (base/api.go AssertClusterHealthy needs the provisioner). Expected to
// skip, with Talos' own reason: ApidSuite TestControlPlaneRouting and
// TestWorkerNoRouting ("information about routable endpoints is not
// available": they need the provisioner's cluster state, -talos.provisioner,
// which only Talos' docker and qemu provisioners give).
//
// Not run, by name (-testify.m), and why:
//   - Tried on v1.11.0 and failing, each bounded at 90s: NodeTaintsSuite
//     (TestUpdateControlPlane waits for the Node's taints to be exactly
//     Talos'; the API server's TaintNodesByCondition admission put
//     node.kubernetes.io/not-ready on the Node at registration, and no
//     kube-controller-manager runs in the test bed to take it off once
//     the Node is Ready: the sim does not play the node lifecycle
//     controller's taint manager); UpdateHostnameSuite (after a hostname
//     change the old Node must go NotReady: the sim's kubelet registers
//     the new name but nothing marks the old one, as the node lifecycle
//     controller would after its grace period; then it reboots the node
//     and waits through AssertRebooted); CommonSuite (TestBaseOCISpec
//     reboots the node and waits ten minutes for a new boot ID and a
//     healthy cluster; the others were not reached); DiscoverySuite
//     (TestMembers, TestRegistries: six members expected, five listed,
//     seen right after UpdateHostnameSuite's interrupted run left a sixth
//     Node, so not yet judged on its own).
//   - EtcdSuite TestForfeitLeadership, TestLeaveCluster, TestRemoveMember,
//     TestDowngrade: each needs the provisioner's cluster state (Talos skips
//     them without it) and resets or reboots real machines.
//   - ApplyConfigSuite TestApply, TestApplyNoOpCRIPatch and
//     TestApplyConfigRotateEncryptionSecrets: they reboot the node (REBOOT
//     mode, or a change Talos applies by rebooting) and wait up to ten
//     minutes for the boot ID of a real VM to change and the cluster to be
//     healthy again through the provisioner (AssertClusterHealthy skips
//     without it). On v1.11.0 the suites read the boot ID through
//     MachineService.Read (base/api.go ReadBootID), which the sim now
//     serves, new at every boot; these tests have not been run again since.
//   - Suites that need a kernel, hardware, containers, images or a network
//     stack of the node's own, which the sim does not run (Dmesg, Logs,
//     Containers, Images, Hardware, Kernel, Mounts, Volumes, Storage,
//     Watchdog, Udev, SELinux, TrustedBoot, UKI, Extensions*, Firewall,
//     IPTables, BGP*, Ethernet, PCIDriverRebind, Process, CGroups,
//     DiskUsage, Sandbox, SBOM, Debug, Monitoring, Wipe, Reset, Reboot,
//     RotateCA, EtcdRecover, Meta, Platform, SideroLink, NetworkConfig,
//     KubeNetworkConfig, ProbeConfig, ProxyURL, EtcFileConfig,
//     Environment, TrustedRoots).
//   - Not tried against the sim yet: on v1.14.1 NodeAnnotations,
//     NodeTaints, Common, Discovery, Kubelet, Security, ServiceAccount,
//     UpdateHostname.
//
// # What stays kinder than Talos
//
// Reboots and boots take RebootDelay, not minutes; etcd joins take
// EtcdJoinDelay; services start at once. A cilium agent pod created on a
// running node (a first install, a node that joins) runs at once; only
// one that was there before a reboot takes CNIStartDelay. An upgrade takes UpgradeDelay,
// its drain evicts no pods, and an installer is pulled at once (a missing
// one fails at once too, where Talos 1.14's legacy Upgrade retries five
// times over two minutes). The installer of the legacy upgrade sequence
// runs no pre-flight check (LifecycleService's does; Talos mounts the
// machine socket into both, install.go RunInstallerContainer): an upgrade
// the new installer refuses, 1.11 to 1.14, goes through, where on Talos
// the sequence fails after it stopped the services; and the Install task
// of a boot after a maintenance apply installs from any installer image
// whose tag is a version, one the registry lacks (a ghcr.io 1.14
// installer) included. The CRI containerd answers ImageService and
// LifecycleService while cri is stopped (after a boot, during an
// upgrade). The upgrade mutex is released when the call ends even if the
// node goes down mid-call (Talos' lease lives 60 seconds). Time is always
// synced and the network always ready, so Bootstrap is never refused with
// "time is not in sync yet". ManifestStatus appears on every control
// plane with etcd data, not only once etcd is healthy on the node that holds
// the manifest lease. Of the bootstrap manifests only CoreDNS's and
// kube-proxy's objects exist in the API server (no bootstrap token, CSR or
// node RBAC objects), and the pods are written, not scheduled: static pods
// are Ready as soon as they exist.
//
// # Talos versions and machinery v1.14.1
//
// The sim is built on machinery v1.14.1 and still plays Talos v1.11.0's
// machined for every machine, whatever version it reports. Where machinery
// v1.14.1 differs from v1.11.0 it follows v1.11.0:
//
//   - Kubernetes images are judged by the machine's own version
//     (kubeimages.go): machinery's Validate and RuntimeValidate judge them
//     by the process-wide version.Tag (compatibility.ValidateKubernetesImageTag),
//     so the sim validates WithLocal and checks the tags itself with
//     compatibility's data for the machine's version, as that Talos does on
//     apply. A machine booted from a 1.10 medium refuses a config for
//     Kubernetes 1.34, as Talos 1.10 does.
//   - Config settings are read through the K8s*/Network* accessors
//     (internal/configview), which answer from a Talos 1.14 document or the
//     v1alpha1 fields alike, as machined v1.14.1's controllers read them.
//   - The dry-run diff is machinery v1.14.1's configdiff.DiffConfigs (the
//     textdiff unified diff); Talos v1.11.0 printed configdiff.DiffToString,
//     which machinery no longer has. devata never parses it.
//   - Version's features report Rbac true whenever a config is loaded
//     (v1.14.1 v1alpha1_server.go Version; RBAC is always on from 1.12).
//   - A machine refuses a config holding a document kind its own Talos
//     does not register (kinds.go; internal/talos DocumentKinds, read in each
//     release's config/types registrations): `"<Kind>" "v1alpha1": not
//     registered` as config/internal/registry New says it, named with its
//     document and line from machinery v1.12.4 on (configloader decoder.go
//     parse); InvalidArgument on a configured node, Unknown "failed to parse
//     config" in Talos 1.11's maintenance mode.
//   - A machine on Talos 1.14 applies every change live (talos v1.14.1
//     v1alpha1_server.go ApplyConfiguration; v1alpha1_runtime.go has no
//     CanApplyImmediate any more): AUTO is always NO_REBOOT, TRY and
//     NO_REBOOT refuse nothing, REBOOT on a configured machine is
//     Unimplemented "the REBOOT mode is not supported, please use AUTO or
//     NO_REBOOT modes instead" (apply.go resolveMode).
//   - MaintenanceServiceCertificates (secrets) is not served: machinery
//     v1.14.1 has no such type (Talos 1.13 removed it, "unify maintenance and
//     regular APIs").
//
// Per version, besides (each citing the releases' sources above): Talos
// 1.13 and later serve ImageService and LifecycleService, and below
// 1.13 they are unknown services; from 1.13 apid fans out only the
// services of its list, the legacy Upgrade refuses a machine that is not
// installed and skips etcd's checks for a preserve upgrade, and the
// installer's output streams by 512-byte reads (1.13) or by line (1.14);
// ghcr.io/siderolabs/installer has no 1.14 installers.
//
// Extensions (schematic.go): the simulated Image Factory holds
// Options.Schematics (and what CreateSchematic adds); an installer of any
// other schematic but the empty one is not found, by a pull, an upgrade or
// the install after a maintenance apply, which then reboots back into
// maintenance mode (v1alpha1_sequencer_tasks.go Install). A machine
// reports its booted installer's schematic as ExtensionStatus (one per
// official extension, then Image Factory's "schematic" extension) on every
// release, from 1.14 also as ImageFactorySchematic, and its KernelCmdline
// (machinery kernel.DefaultArgs for its version, then the schematic's
// arguments). A 1.14 config's UnattendedInstallConfig names the installer
// (controllers/runtime/unattended_install.go).
//
// An UnattendedInstallConfig install on 1.14 that fails (unattended.go,
// v1.14.1 controllers/runtime/unattended_install.go
// UnattendedInstallController.reconcile) does not reboot: the machine
// leaves maintenance mode with the config active (in memory only: a
// reboot before an install succeeds loses it), UnattendedInstallStatus
// says phase "failed" with the installer's error, and the install runs
// again on each restart of the failed controller (cosi-project/runtime
// rruntime run.go Run: exponential backoff from 500ms, times 1.5, ±50%,
// at most 60s, for ever); one that succeeds says "waiting-for-reboot",
// persists the config and reboots, and the status says "installed".
// Pre-1.14 machines and configs without the document keep the install
// sequence's failure (back into maintenance mode without the config).
// Kinder than Talos: the sim writes the status only on this path (after
// a first install that succeeds, none is served), keeps it as last
// written across reboots (Talos recomputes or drops it), does not retry
// on the controller's input events (config, disks), and reboots after the
// install even when the document's reboot is false.
//
// What stays kinder than a Talos of another version (to be modelled per
// version, issue 30): the resource
// definitions the sim serves (cosi.go talosResources, 158 types) are the
// same on every release but ImageFactorySchematic,
// UnattendedInstallStatus, KubeletStatus and NTPStatus, registered from
// 1.14 only (rdversions.go: machined's v1alpha2_state.go NewState registers 155
// types in v1.11.0, 165 in v1.13.9 and 200 in v1.14.1; the other
// additions, LVM and MD arrays, ContainerConfig's containers, …, are not
// served on any release, and v1.11.0's MaintenanceServiceCerts, gone in
// 1.13, not either).
//
// # Storage
//
// Apply runs machinery's RuntimeValidate as machined does (maintenance
// server.go and v1alpha1_server.go ApplyConfiguration): Kubernetes images
// must be versions the machine's Talos supports (above), and in maintenance
// mode the install disk selector must match one of the node's Disk
// resources.
//
// A machine has a system disk (MachineSpec.SystemDisk, default /dev/sda;
// once configured, its install disk; transport nvme, mmc, virtio or sata
// from the device name, as the kernel reports it), a 2 TiB data
// disk /dev/sdb, a blank 1 TiB spare /dev/sdc and a 512 GiB disk for every
// other device its config's machine.disks names. On every sync the node's
// storage is derived by replaying one pass of Talos v1.11.0's volume manager
// over blank disks, in its order (volume_manager.go, VolumeManagerController;
// internal/volumes CompareVolumeConfigs, LocateAndProvision,
// CheckDiskForProvisioning, CreatePartition, Format; the full list of sources
// heads sim/storage.go). So a UserVolumeConfig lands on the first disk its
// diskSelector matches (Talos' own CEL disk environment, system_disk
// included) that has room, with GPT overhead and 1 MiB alignment; one that
// matches no disk is `failed` "no disks matched selector for volume", one that
// finds no room names how many disks matched; once a volume is not ready,
// later volumes that still have to be created stay `waiting`; an existing
// partition with the wrong filesystem fails "filesystem type mismatch". A
// ready volume is mounted at /var/mnt/<name>; machine.disks partitions become
// `<device>-<n>` volumes mounted at their mount points. The node shows Disk,
// SystemDisk, DiscoveredVolume (only signatures go-blockdevice's blkid
// knows), VolumeStatus, block and runtime MountStatus, and the Mounts API
// lists every mounted volume with the partition as its source and its
// statfs sizes. The storage faults (DisksMissing, DiskSignatures,
// VolumeFailed, VolumeMissing, VolumeFilesystem, VolumeSize, MountMissing,
// PartitionMissing, KubeletMountMissing, KubeletMountOptions) bend the pass
// as the Faults fields say.
//
// # Kubelets and the Cilium agent
//
// With a Kubernetes API server (RunKubelets, SyncKubelets) each configured
// machine plays its kubelet: the Node, its Ready condition and Lease, and an
// HTTPS endpoint (self-signed, on the Node's InternalIP and
// daemonEndpoints port) serving pods/exec with the CRI streaming server's
// remotecommand code. A Node whose config has cluster.network.cni none is
// NotReady (NetworkPluginNotReady) until a cilium agent pod runs on it,
// and again after every reboot until that pod's agent runs again,
// Options.CNIStartDelay after the boot (the pod meanwhile Running, not
// Ready): the kubelet's Ready condition carries the runtime's network
// status (kubernetes v1.37.2 pkg/kubelet/kubelet.go updateRuntimeUp sets
// runtimeState's network error from containerd's NetworkReady;
// kubelet_node_status.go defaultNodeStatusFuncs passes
// runtimeState.networkErrors to nodestatus/setters.go ReadyCondition,
// Ready=False, KubeletNotReady, "container runtime network not ready:
// …"). The Node turns Ready in the round the agent pod is posted Ready,
// never before (kubelet_cni_test.go). A boot clears what machined knew of
// the Node (its NodeStatus is in memory): MachineStatus' nodeReady reads
// "status is not available yet" until the kubelet posts again, never a
// Ready left from before the reboot.
// Node taints (kubelet_taints.go) as machined puts them there: the
// config's taints (v1.14.1 node_taint_spec.go NodeTaintSpecController.Run:
// K8sNodeConfig().Taints(), split by labels.ParseTaint; the control plane's
// NoSchedule taint unless scheduling on control planes is allowed) are
// registered with the Node by the kubelet from Talos 1.14
// (kubelet_config.go RegisterWithTaints), up to 1.13 only the control
// plane's (v1.11.0 kubelet_spec.go); then NodeApplyController.ApplyTaints
// (node_apply.go) adds, updates and removes the taints it owns
// (talos.dev/owned-taints). A worker writes with its kubelet's kubeconfig
// (getK8sClient), and NodeRestriction refuses a node that modifies its own
// taints: on a worker the sim changes no taint after registration.
// Approximation: Talos' whole Node update then fails and is retried, labels
// included; the sim still applies the worker's labels.
// envtest runs no controllers and no containers, so once InstallCilium has
// put the Kubernetes side of a Cilium install there, the sim also plays the
// agent DaemonSet's pods (cilium_pods.go) and the agent (cilium_exec.go,
// cilium_agent.go, cilium_dbg.go: cilium-dbg replies from Cilium's models
// and tables, derived from cilium-config, CiliumNodeConfigs, Services and
// EndpointSlices), and runs devata's probe pods (probe.go). The
// Cilium faults (CiliumAgentNotReady, CiliumAgentStarting, CiliumStatusReply,
// CiliumControllersFailing, CiliumBackendsMissing, CiliumFrontendsStuck,
// CiliumNoShell, CiliumPodNetworkBroken) bend that.
//
// devata's coredns-probe pods (dnsprobe.go) run dig against the kube-dns
// ClusterIP from the node's pod network, and the sim answers as Cilium,
// CoreDNS and BIND's dig would: the query reaches CoreDNS only through
// the node's agent (kube-proxy replacement on, a reconciled frontend for
// ClusterIP:53/UDP, CiliumPodNetworkBroken off), else it times out; a
// frontend with no backend (no CoreDNS pod Ready, so no ready endpoint in
// kube-dns' EndpointSlice) is refused, as Cilium's default
// service-no-backend-response (reject) makes it; a backend answers unless
// CoreDNSNotAnswering is set on the machine its pod runs on. CoreDNS
// answers from its Corefile as the ConfigMap holds it (Talos v1.11.0
// k8stemplates/coredns.go: `kubernetes <dnsDomain> in-addr.arpa
// ip6.arpa`, ttl 30): a Service's name in that zone is its ClusterIPs of
// the family asked, another name in the zone NXDOMAIN; dig prints what
// BIND 9.18's bin/dig/dighost.c prints (";; communications error to
// IP#53: timed out" per try, ";; no servers could be reached", exit 9;
// a reply's header and answer section, exit 0), posted as the
// container's termination message. Approximations: of the zone's records
// only <service>.<namespace>.svc ClusterIPs (no headless, pod or SRV
// records); a name outside the zone, which the forward plugin sends to
// the node's upstream resolvers, is NXDOMAIN; a query answers when any
// backend answers (Cilium picks one per query and dig retries: which one
// is not modelled); dig's EDNS and COOKIE lines are left out.
//
// RunKubeAccess (kubeaccess.go) plays machined's kubernetesTalosAPIAccess
// controllers (v1.11.0 and v1.14.1 controllers/kubeaccess, crd_controller.go
// syncHandler): on each running control plane whose active config enables
// the feature, the talos.dev CRD and, per talos.dev ServiceAccount, a Secret
// with a talosconfig for talos.default whose 6 h certificate from the OS CA
// carries the roles, or status.failureReason. Not modelled: the `talos`
// Service and its endpoints (controllers/kubeaccess/endpoint.go; devata
// dials machines directly), events, and informers (it polls).
//
// Faults (see Faults) are set per machine from Go at any time; Crash drops a
// machine's connections and reboots it.
//
// # Scale
//
// A machine costs one goroutine (gRPC's accept loop for its listener) and
// about 30 KiB of heap, mostly its COSI resources and parsed config; server
// certificates are issued on the first mTLS handshake. Timers, not
// goroutines, drive reboots and TRY rollbacks.
//
// # Kubernetes image pulls
//
// MachineService.ImagePull (kubepull.go), what talosctl upgrade-k8s
// pre-pulls with (v1.14.1 pkg/cluster/kubernetes/talos_managed.go
// prePullImages), as machined serves it in v1.11.0 and v1.14.1
// (v1alpha1_images.go ImagePull, containerdNamespaceHelper): the sim's
// registry holds the Kubernetes images (kubelet, kube-apiserver,
// kube-controller-manager, kube-scheduler, kube-proxy, CoreDNS) at any
// vX.Y.Z tag; each pull is recorded (Machine.ImagePulls). Approximation: a
// pull takes no time and sends no progress (the unary call has none).
package sim
