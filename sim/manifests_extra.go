package sim

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
)

// A control plane downloads its extra manifests as Talos'
// ExtraManifestController does (v1.14.1 controllers/k8s/extra_manifest.go
// process, processURL; the list from control_plane.go
// NewControlPlaneExtraManifestsController: cluster.extraManifests with
// cluster.extraManifestHeaders, priority "99", named by their URL): an
// HTTP GET of each URL with the headers, once its network is up, whose
// body becomes the Manifest resource "99-<URL>". A download that fails
// (no answer, a status other than 2xx, as go-getter's HttpGetter refuses
// it) serves no Manifest for that URL and the controller fails and runs
// again after a backoff (the sim tries again extraRetry later); one that
// succeeded is not fetched again until the config's URL or headers
// change or the machine boots again (the controller runs on those
// events). The sim fetches on its own goroutine, never under sync, and
// bounds a body at extraMaxBytes.

const (
	extraRetry    = time.Second
	extraTimeout  = 10 * time.Second
	extraMaxBytes = 16 << 20
)

// extraFetch is one URL's download in one boot.
type extraFetch struct {
	contents string
	ok       bool
	inflight bool
	failedAt time.Time
}

// extraManifests keeps each machine's downloads, by extraKey.
type extraManifests struct {
	mu      sync.Mutex
	fetches map[string]*extraFetch
}

// extraKey names a download: the boot, the URL and its headers.
func extraKey(booted time.Time, url string, headers map[string]string) string {
	var b strings.Builder
	b.WriteString(booted.Format(time.RFC3339Nano) + " " + url)
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		b.WriteString("\n" + k + ": " + headers[k])
	}

	return b.String()
}

// downloaded is the body of each extra manifest of the config s runs that
// this boot downloaded, by URL.
func (m *Machine) downloaded(s snapshot) map[string]string {
	if s.active == nil || !s.controlPlane() {
		return nil
	}

	m.extra.mu.Lock()
	defer m.extra.mu.Unlock()

	out := map[string]string{}

	for _, em := range s.active.K8sExternalManifestConfigs() {
		if f := m.extra.fetches[extraKey(s.booted, em.URL(), em.Headers())]; f != nil && f.ok {
			out[em.URL()] = f.contents
		}
	}

	return out
}

// fetchExtraManifests starts the downloads s's config asks for and this
// boot has not made (or made and failed extraRetry ago); each one that
// ends syncs the machine again.
func (m *Machine) fetchExtraManifests(s snapshot) {
	if s.active == nil || s.down || !s.controlPlane() {
		return
	}

	ems := s.active.K8sExternalManifestConfigs()

	m.extra.mu.Lock()
	defer m.extra.mu.Unlock()

	if m.extra.fetches == nil {
		m.extra.fetches = map[string]*extraFetch{}
	}

	for k := range m.extra.fetches {
		if !strings.HasPrefix(k, s.booted.Format(time.RFC3339Nano)+" ") {
			delete(m.extra.fetches, k) // an earlier boot's
		}
	}

	for _, em := range ems {
		k := extraKey(s.booted, em.URL(), em.Headers())

		f := m.extra.fetches[k]
		if f != nil && (f.ok || f.inflight || time.Since(f.failedAt) < extraRetry) {
			continue
		}

		if f == nil {
			f = &extraFetch{}
			m.extra.fetches[k] = f
		}

		f.inflight = true

		go m.fetchExtraManifest(em, f)
	}
}

func (m *Machine) fetchExtraManifest(em config.K8sExternalManifestConfig, f *extraFetch) {
	body, err := downloadManifest(em.URL(), em.Headers())

	m.extra.mu.Lock()
	f.inflight = false

	if err != nil {
		f.failedAt = time.Now()
	} else {
		f.contents, f.ok = body, true
	}
	m.extra.mu.Unlock()

	if err != nil {
		m.fleet.log.Warn("sim: controller failed; it runs again", "machine", m.name, "controller", "k8s.ExtraManifestController",
			"error", fmt.Errorf("error downloading %q: %w", em.URL(), err))
		time.AfterFunc(extraRetry, m.sync) // the controller's backoff

		return
	}

	m.sync()
}

// downloadManifest GETs url with headers, as go-getter's HttpGetter: a status
// other than 2xx is an error.
func downloadManifest(url string, headers map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), extraTimeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}

	for k, v := range headers {
		req.Header.Add(k, v)
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close() //nolint:errcheck

	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return "", fmt.Errorf("bad response code: %d", resp.StatusCode)
	}

	body, err := io.ReadAll(io.LimitReader(resp.Body, extraMaxBytes+1))
	if err != nil {
		return "", err
	}

	if len(body) > extraMaxBytes {
		return "", fmt.Errorf("larger than the sim's %d bytes", extraMaxBytes)
	}

	return string(body), nil
}
