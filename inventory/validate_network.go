package inventory

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"
)

func (v *validator) validateEndpoint(path, s string) {
	if s == "" {
		v.errorf(path, "required: the Kubernetes API URL, e.g. https://10.20.0.10:6443")
		return
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		v.errorf(path, "%q is not a URL: %v", s, err)
	case u.Scheme != "https":
		v.errorf(path, "%q: scheme must be https", s)
	case u.Port() == "":
		v.errorf(path, "%q has no port: add one, e.g. :6443", s)
	case !validHost(u.Hostname()):
		v.errorf(path, "%q: %q is not a host name or IP address", s, u.Hostname())
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil:
		v.errorf(path, "%q: give only scheme, host and port", s)
	default:
		if p, _ := strconv.Atoi(u.Port()); p < 1 || p > 65535 {
			v.errorf(path, "%q: port out of range 1-65535", s)
		}
	}
}

type namedPrefix struct {
	path string
	p    netip.Prefix
}

func (v *validator) cidrs(path string, list []string) []namedPrefix {
	var out []namedPrefix
	for i, s := range list {
		ip := fmt.Sprintf("%s[%d]", path, i)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			v.errorf(ip, "%q is not a CIDR, e.g. 10.244.0.0/16", s)
			continue
		}
		if p.Masked() != p {
			v.errorf(ip, "%q has host bits set: use %s", s, p.Masked())
			continue
		}
		out = append(out, namedPrefix{ip, p})
	}
	return out
}

func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if looksNumeric.MatchString(h) {
		return false // meant as an IPv4 address, and not a valid one
	}
	return len(validation.IsDNS1123Subdomain(h)) == 0
}
