package netcheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/cilium/api/v1/models"
)

// AgentObservation is what one exec into a node's cilium agent returned:
// its status and its frontends for the kubernetes Service. Each part carries
// its own error.
type AgentObservation struct {
	// Pod is the agent pod exec'd into ("kube-system/cilium-x7k2p").
	Pod string
	// Err is set when the exec itself failed (forbidden, the kubelet not
	// answering, the container gone): nothing else is known.
	Err error

	Status    *models.StatusResponse
	StatusErr error

	// Frontends are the agent's load-balancer rows for the frontends
	// asked for, by address; a frontend the agent does not hold is absent.
	// When the agent has no statedb shell (FromServiceList), they come from
	// `cilium-dbg service list`, whose status cannot show a stuck frontend.
	Frontends       map[string]*FrontendRow
	FromServiceList bool
	FrontendsErr    error
}

// FrontendRow is one frontend as the agent's load-balancer table holds it:
// the fields of `cilium-dbg shell -- db/show frontends -f json` that
// netcheck reads (Cilium's pkg/loadbalancer.Frontend; its API models have
// no type for the table).
type FrontendRow struct {
	Address     string `json:"Address"`
	ServiceName string `json:"ServiceName"`
	Status      struct {
		Kind      string    `json:"kind"`
		Error     *string   `json:"error"`
		UpdatedAt time.Time `json:"updated-at"`
	} `json:"Status"`
	Backends []struct {
		Address string `json:"Address"`
	} `json:"Backends"`
}

// BackendAddrs are the row's backends, protocols upper-case.
func (r *FrontendRow) BackendAddrs() []string {
	out := make([]string, 0, len(r.Backends))
	for _, b := range r.Backends {
		out = append(out, upperProto(b.Address))
	}

	return out
}

// upperProto makes "10.0.0.1:443/tcp" "10.0.0.1:443/TCP": Cilium's tables
// write protocols upper-case, its REST models' enums lower-case.
func upperProto(a string) string {
	if i := strings.LastIndexByte(a, '/'); i >= 0 {
		return a[:i+1] + strings.ToUpper(a[i+1:])
	}

	return a
}

// Markers that split the one exec's output into its parts.
const (
	markSection = "#devata "
	markExit    = "#devata-exit "
)

// AgentCommand is the one command netcheck runs in a node's agent per pass:
// `cilium-dbg status -o json`, then for each frontend `cilium-dbg shell --
// db/get frontends ADDRESS -f json`, and `cilium-dbg service list -o json`
// only if the shell failed. A marker line before each part and after a
// failed command lets one reply carry them all.
func AgentCommand(frontends []string) []string {
	var b strings.Builder

	b.WriteString(`cilium-dbg status -o json || echo "` + markExit + `$?"` + "\n")

	if len(frontends) > 0 {
		b.WriteString("shell=ok\n")

		for _, a := range frontends {
			q := shellQuote(a)
			fmt.Fprintf(&b, "echo %s\n", shellQuote(markSection+"frontend "+a))
			fmt.Fprintf(&b, "cilium-dbg shell -- db/get frontends %s -f json || { echo \"%s$?\"; shell=failed; }\n", q, markExit)
		}

		fmt.Fprintf(&b, "if [ \"$shell\" = failed ]; then echo %s; cilium-dbg service list -o json || echo \"%s$?\"; fi\n", shellQuote(markSection+"service-list"), markExit)
	}

	return []string{"sh", "-c", b.String()}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ObserveAgent runs AgentCommand in the pod's cilium-agent container and
// parses the reply. It never returns an error: failures are in the result.
func ObserveAgent(ctx context.Context, ex Execer, pod AgentPod, frontends []string) *AgentObservation {
	stdout, stderr, err := ex.Exec(ctx, pod.Namespace, pod.Name, AgentContainer, AgentCommand(frontends))

	var exit *ExitError
	if err != nil && !errors.As(err, &exit) {
		return &AgentObservation{Pod: pod.Ref(), Err: err}
	}

	o := ParseAgentReply(stdout, stderr, frontends)
	o.Pod = pod.Ref()

	return o
}

// section is one part of the reply.
type section struct {
	name, arg string
	body      bytes.Buffer
	exit      int // -1: ran fine
}

// ParseAgentReply splits and parses the output of AgentCommand.
func ParseAgentReply(stdout, stderr []byte, frontends []string) *AgentObservation {
	o := &AgentObservation{}
	sections := splitSections(stdout)

	st := sections[0]
	if st.exit >= 0 {
		o.StatusErr = st.failed("cilium-dbg status", stderr)
	} else {
		o.Status, o.StatusErr = ParseAgentStatus(st.body.Bytes())
	}

	if len(frontends) == 0 {
		return o
	}
	o.parseFrontends(sections[1:], stderr)

	return o
}

// splitSections cuts AgentCommand's stdout at its section and exit markers.
// The first section is cilium-dbg status, which has no marker of its own.
func splitSections(stdout []byte) []*section {
	sections := []*section{{name: "status", exit: -1}}

	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 64<<10), 64<<20)

	for sc.Scan() {
		line := sc.Text()
		cur := sections[len(sections)-1]

		switch {
		case strings.HasPrefix(line, markExit):
			cur.exit, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, markExit)))
		case strings.HasPrefix(line, markSection):
			name, arg, _ := strings.Cut(strings.TrimPrefix(line, markSection), " ")
			sections = append(sections, &section{name: name, arg: arg, exit: -1})
		default:
			cur.body.WriteString(line)
			cur.body.WriteByte('\n')
		}
	}

	return sections
}

// failed is the error of a section whose command exited non-zero, with the
// tail of the reply's stderr.
func (s *section) failed(what string, stderr []byte) error {
	msg := fmt.Sprintf("%s exited %d", what, s.exit)
	if t := tail(stderr); t != "" {
		msg += ": " + t
	}

	return errors.New(msg)
}

// parseFrontends fills Frontends from the frontend sections, or from the
// service-list section, which an agent without the db/get shell falls back to.
func (o *AgentObservation) parseFrontends(sections []*section, stderr []byte) {
	o.Frontends = map[string]*FrontendRow{}

	var shellErr error

	for _, s := range sections {
		switch s.name {
		case "frontend":
			if s.exit >= 0 {
				shellErr = s.failed("cilium-dbg shell -- db/get frontends", stderr)
				continue
			}

			rows, err := ParseFrontendRows(s.body.Bytes())
			if err != nil {
				o.FrontendsErr = err
				continue
			}

			for _, r := range rows {
				if upperProto(r.Address) == upperProto(s.arg) {
					o.Frontends[upperProto(s.arg)] = r
				}
			}
		case "service-list":
			o.FromServiceList = true
			if s.exit >= 0 {
				o.FrontendsErr = fmt.Errorf("%w; and %w", shellErr, s.failed("cilium-dbg service list", stderr))
				continue
			}

			rows, err := ParseServiceList(s.body.Bytes())
			if err != nil {
				o.FrontendsErr = err
				continue
			}

			clear(o.Frontends)

			for _, r := range rows {
				o.Frontends[r.Address] = r
			}
		}
	}

	if shellErr != nil && !o.FromServiceList && o.FrontendsErr == nil {
		o.FrontendsErr = shellErr
	}
}

// ParseFrontendRows decodes `db/show frontends -f json` or `db/get`
// output: zero or more JSON objects one after the other.
func ParseFrontendRows(data []byte) ([]*FrontendRow, error) {
	dec := json.NewDecoder(bytes.NewReader(data))

	var out []*FrontendRow

	for {
		r := &FrontendRow{}

		err := dec.Decode(r)
		if errors.Is(err, io.EOF) {
			return out, nil
		}

		if err != nil {
			return nil, fmt.Errorf("cilium-dbg shell -- db/get frontends: %w (got %q)", err, head(data))
		}

		if r.Address == "" {
			return nil, fmt.Errorf("cilium-dbg shell -- db/get frontends: a row without Address (is this Cilium 1.20's frontends table?): %q", head(data))
		}

		out = append(out, r)
	}
}

// ParseServiceList decodes `cilium-dbg service list -o json` into Cilium's
// models and returns each ClusterIP service as a frontend row. Protocols
// come upper-case although the model's enum is lower-case, so the models
// are not validated, only decoded.
func ParseServiceList(data []byte) ([]*FrontendRow, error) {
	var svcs []*models.Service
	if err := json.Unmarshal(data, &svcs); err != nil {
		return nil, fmt.Errorf("cilium-dbg service list: %w (got %q)", err, head(data))
	}

	var out []*FrontendRow

	for _, s := range svcs {
		if s == nil || s.Spec == nil || s.Spec.FrontendAddress == nil {
			continue
		}

		fa := s.Spec.FrontendAddress
		r := &FrontendRow{Address: L3n4(fa.IP, int(fa.Port), fa.Protocol)}

		if f := s.Spec.Flags; f != nil {
			r.ServiceName = f.Namespace + "/" + f.Name
		}

		r.Status.Kind = "Done" // the REST view mirrors the spec: no stuck state to see

		for _, b := range s.Spec.BackendAddresses {
			if b == nil || b.IP == nil {
				continue
			}

			r.Backends = append(r.Backends, struct {
				Address string `json:"Address"`
			}{L3n4(*b.IP, int(b.Port), b.Protocol)})
		}

		out = append(out, r)
	}

	return out, nil
}
