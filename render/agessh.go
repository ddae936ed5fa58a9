package render

// SSH keys as age keys, as the age CLI takes them (filippo.io/age/agessh,
// cmd/age/parse.go): an ssh-ed25519 or ssh-rsa public key is a recipient,
// and an unencrypted OpenSSH private key file an identity. agessh's own
// errors quote the key they could not parse, so none of them is passed on.

import (
	"bytes"
	"crypto/rsa"
	"errors"
	"fmt"
	"strings"

	"filippo.io/age"
	"filippo.io/age/agessh"
	"golang.org/x/crypto/ssh"
)

// maxSSHIdentity bounds an SSH private key file, as the age CLI bounds it
// (16 KiB: an RSA-16384 key in OpenSSH's format fits).
const maxSSHIdentity = 16 << 10

// minSSHRSABits is the smallest RSA key the age CLI encrypts to.
const minSSHRSABits = 2048

// sshRecipient is an agessh recipient that knows its public key's
// authorized_keys form ("ssh-ed25519 AAAA…", without the comment), so that
// a sidecar can record it as it records an age1… recipient.
type sshRecipient struct {
	age.Recipient
	text string
}

func (r sshRecipient) String() string { return r.text }

// parseSSHRecipient reads an OpenSSH public key line (type, base64 key and
// an optional comment; no options). Errors never quote it.
func parseSSHRecipient(s string) (age.Recipient, error) {
	pub, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(s))
	switch {
	case err != nil:
		return nil, errors.New("is not an SSH public key line (TYPE BASE64 [COMMENT], as in FILE.pub)")
	case len(options) > 0 || len(bytes.TrimSpace(rest)) > 0:
		return nil, errors.New("is an authorized_keys line with options or more than one key: give the key alone (the line of FILE.pub)")
	}
	switch t := pub.Type(); t {
	case ssh.KeyAlgoED25519:
	case ssh.KeyAlgoRSA:
		if ck, ok := pub.(ssh.CryptoPublicKey); ok {
			if k, ok := ck.CryptoPublicKey().(*rsa.PublicKey); ok && k.N.BitLen() < minSSHRSABits {
				return nil, fmt.Errorf("is an RSA key of %d bits, fewer than the %d age encrypts to: use an ssh-ed25519 key or an age1… recipient", k.N.BitLen(), minSSHRSABits)
			}
		}
	default:
		return nil, fmt.Errorf("is an SSH key of type %s, which age does not encrypt to: use ssh-ed25519, ssh-rsa or an age1… recipient", t)
	}
	r, err := agessh.ParseRecipient(s)
	if err != nil {
		return nil, errors.New("is an SSH public key age does not accept: use ssh-ed25519, ssh-rsa or an age1… recipient")
	}
	return sshRecipient{Recipient: r, text: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))}, nil
}

// parseSSHIdentity reads an unencrypted OpenSSH (or PEM) private key of
// type ed25519 or RSA as an age identity, as `age -d -i ~/.ssh/id_ed25519`
// does. A passphrase-protected key is refused: devata never prompts.
// Errors name source and never quote the key.
func parseSSHIdentity(source string, data []byte) ([]age.Identity, error) {
	if len(data) > maxSSHIdentity {
		return nil, fmt.Errorf("%s holds a PEM block of more than %d KiB, larger than any SSH private key: point it at the key file itself", source, maxSSHIdentity>>10)
	}
	id, err := agessh.ParseIdentity(data)
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		return nil, fmt.Errorf("%s is a passphrase-protected SSH private key, which devata cannot open without a prompt: use a copy without a passphrase (ssh-keygen -p -N '' -f COPY), mode 0600, or an age identity (AGE-SECRET-KEY-1…)", source)
	case err != nil && strings.HasPrefix(err.Error(), "unsupported SSH identity type"):
		return nil, fmt.Errorf("%s is an SSH private key of a type age does not decrypt with: use an ed25519 or RSA key, or an age identity (AGE-SECRET-KEY-1…)", source)
	case err != nil:
		return nil, fmt.Errorf("%s starts with -----BEGIN but is not an SSH private key that parses (OpenSSH or PEM, ed25519 or RSA): point it at the private key file (not FILE.pub) or at an age identity file", source)
	}
	return []age.Identity{id}, nil
}
