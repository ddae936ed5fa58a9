package sim

import (
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// event is one entry of a machine's event log, as machined's runtime
// events buffer holds them (runtime/v1alpha1/v1alpha1_events.go Events).
type event struct {
	id      string
	at      time.Time
	payload proto.Message
}

// eventsLog is what the sim's machined has published: each boot's
// sequence start and stop and its services' state changes, in the order
// they happened. Entries are recorded the first time the machine's state
// shows them (syncEvents), each under an ID of its own that stays.
type eventsLog struct {
	seen    map[string]bool
	entries []event
	next    uint64
}

// maxEvents is the capacity of machined's events buffer
// (v1alpha1_events.go NewEvents: 1000 events, older ones dropped).
const maxEvents = 1000

// xidEncoding is xid's (github.com/rs/xid) base32hex alphabet, lower case.
var xidEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// eventID makes a 20-character ID shaped as machined's xid event IDs
// (runtime.NewEvent: xid.New()): a time, then a counter; sorted as the
// events are.
func eventID(at time.Time, n uint64) string {
	var b [12]byte
	binary.BigEndian.PutUint32(b[:4], uint32(at.Unix()))
	binary.BigEndian.PutUint64(b[4:], n)
	return xidEncoding.EncodeToString(b[:])
}

func parseEventID(id string) error {
	if len(id) != 20 {
		return errors.New("xid: invalid ID")
	}
	_, err := xidEncoding.DecodeString(id)
	if err != nil {
		return errors.New("xid: invalid ID")
	}
	return nil
}

var serviceActions = map[string]machine.ServiceStateEvent_Action{
	"Preparing": machine.ServiceStateEvent_PREPARING,
	"Waiting":   machine.ServiceStateEvent_WAITING,
	"Running":   machine.ServiceStateEvent_RUNNING,
	"Stopping":  machine.ServiceStateEvent_STOPPING,
	"Finished":  machine.ServiceStateEvent_FINISHED,
	"Failed":    machine.ServiceStateEvent_FAILED,
	"Skipped":   machine.ServiceStateEvent_SKIPPED,
	"Starting":  machine.ServiceStateEvent_STARTING,
}

// syncEvents records what the machine's state shows that its log lacks:
// the boot sequence's start (SequenceEvent boot START, when it booted),
// each service event of this boot (ServiceStateEvent, as system/service
// runner publishes them: service_runner.go UpdateState), and the boot
// sequence's end once every service is up (SequenceEvent boot STOP).
// Talos publishes many more (phases, tasks, addresses, MachineStatus);
// the sim's log holds these.
func (m *Machine) syncEvents() {
	s := m.snap()
	gen := m.bootGeneration()
	type candidate struct {
		key     string
		at      time.Time
		payload proto.Message
	}
	var found []candidate
	if s.configured() && !s.down {
		found = append(found, candidate{fmt.Sprintf("%d/boot/start", gen), s.booted,
			&machine.SequenceEvent{Sequence: "boot", Action: machine.SequenceEvent_START}})
		for _, svc := range servicesOf(s) {
			for _, ev := range svc.events {
				if ev.ts.Before(s.booted) || ev.ts.After(time.Now()) {
					continue
				}
				found = append(found, candidate{fmt.Sprintf("%d/%s/%s/%s/%d", gen, svc.id, ev.state, ev.msg, ev.ts.UnixNano()), ev.ts,
					&machine.ServiceStateEvent{Service: svc.id, Action: serviceActions[ev.state], Message: ev.msg}})
			}
		}
		if s.bootDone {
			found = append(found, candidate{fmt.Sprintf("%d/boot/stop", gen), time.Now(),
				&machine.SequenceEvent{Sequence: "boot", Action: machine.SequenceEvent_STOP}})
		}
	}
	slices.SortStableFunc(found, func(a, b candidate) int { return a.at.Compare(b.at) })

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.events.seen == nil {
		m.events.seen = map[string]bool{}
	}
	for _, c := range found {
		if m.events.seen[c.key] {
			continue
		}
		m.events.seen[c.key] = true
		m.events.next++
		m.events.entries = append(m.events.entries, event{id: eventID(c.at, m.events.next), at: c.at, payload: c.payload})
	}
	if n := len(m.events.entries); n > maxEvents {
		m.events.entries = slices.Delete(m.events.entries, 0, n-maxEvents)
	}
}

// eventsSince returns the log's entries from index i on.
func (m *Machine) eventsSince(i int) []event {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i >= len(m.events.entries) {
		return nil
	}
	return slices.Clone(m.events.entries[i:])
}

func (m *Machine) eventCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.events.entries)
}

// Events streams the machine's events as machined's Events does
// (v1alpha1_server.go Events; runtime/v1alpha1/v1alpha1_events.go Watch):
// first an empty "hello" event, then the tail the request asks for
// (TailEvents: that many of the newest, -1 all, 0 none; TailId: those
// after that event; TailSeconds: those of the last seconds), then every
// new one until the caller goes away. Each is a machine.Event whose Data
// is the payload under the type URL talos/runtime/<proto name>.
func (a *machineAPI) Events(req *machine.EventsRequest, srv machine.MachineService_EventsServer) error {
	t, _ := target(srv.Context())

	if req.GetTailId() != "" {
		if err := parseEventID(req.GetTailId()); err != nil {
			return fmt.Errorf("error parsing tail_id: %w", err)
		}
	}

	if err := srv.Send(&machine.Event{Data: &anypb.Any{}, ActorId: req.GetWithActorId()}); err != nil {
		return err
	}

	t.syncEvents()
	all := t.eventsSince(0)
	start := len(all)
	switch {
	case req.GetTailId() != "":
		// the events after it; all of them when it is gone from the buffer
		start = 0
		for i, e := range all {
			if e.id == req.GetTailId() {
				start = i + 1
			}
		}
	case req.GetTailSeconds() != 0:
		since := time.Now().Add(-time.Duration(req.GetTailSeconds()) * time.Second)
		start = len(all) - len(slices.DeleteFunc(slices.Clone(all), func(e event) bool { return e.at.Before(since) }))
	case req.GetTailEvents() < 0:
		start = 0
	case req.GetTailEvents() > 0:
		start = max(0, len(all)-int(req.GetTailEvents()))
	}
	// an actor filter (WithActorID) matches none of the sim's events,
	// which no request caused
	if req.GetWithActorId() != "" {
		start = len(all)
	}

	send := func(es []event) error {
		for _, e := range es {
			value, err := proto.Marshal(e.payload)
			if err != nil {
				return err
			}
			msg := &machine.Event{Data: &anypb.Any{TypeUrl: "talos/runtime/" + string(e.payload.ProtoReflect().Descriptor().FullName()), Value: value}, Id: e.id}
			if err := srv.Send(msg); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send(all[start:]); err != nil {
		return err
	}

	next := len(all)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-srv.Context().Done():
			return srv.Context().Err()
		case <-tick.C:
		}
		t.syncEvents()
		if req.GetWithActorId() != "" {
			next = t.eventCount()
			continue
		}
		es := t.eventsSince(next)
		next += len(es)
		if err := send(es); err != nil {
			if strings.Contains(err.Error(), "context canceled") {
				return nil
			}
			return err
		}
	}
}
