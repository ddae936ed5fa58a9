package render

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
	"gopkg.in/yaml.v3"
)

// sops YAML files. devata reads them itself rather than through
// github.com/getsops/sops/v3/decrypt: that package pulls every key service
// sops supports (AWS, GCP, Azure, Vault, Huawei Cloud, PGP) into the build.
// What follows is sops' documented YAML format with age recipients only:
//   - sops.age[].enc (or the single group in sops.key_groups) is the 32-byte
//     data key, age-encrypted and armored for one recipient;
//   - each value is ENC[AES256_GCM,data:…,iv:…,tag:…,type:…], sealed with
//     the data key and, as additional data, the path of mapping keys joined
//     and ended by ":" (list items share their list's path);
//   - sops.mac is the upper-case hex SHA-512 over every value in document
//     order (comments and nulls skipped), sealed the same way with
//     sops.lastmodified (RFC 3339) as additional data.

// sopsKeys are the key services a data key is wrapped for, at the top of
// the metadata or in one key group.
type sopsKeys struct {
	Age     []sopsAgeKey `yaml:"age"`
	KMS     []yaml.Node  `yaml:"kms"`
	GCPKMS  []yaml.Node  `yaml:"gcp_kms"`
	HCKMS   []yaml.Node  `yaml:"hckms"`
	AzureKV []yaml.Node  `yaml:"azure_kv"`
	HCVault []yaml.Node  `yaml:"hc_vault"`
	PGP     []yaml.Node  `yaml:"pgp"`
}

func (k sopsKeys) others() int {
	return len(k.KMS) + len(k.GCPKMS) + len(k.HCKMS) + len(k.AzureKV) + len(k.HCVault) + len(k.PGP)
}

type sopsAgeKey struct {
	Recipient string `yaml:"recipient"`
	Enc       string `yaml:"enc"`
}

// sopsMeta is the part of the sops metadata devata reads.
type sopsMeta struct {
	sopsKeys       `yaml:",inline"`
	KeyGroups      []sopsKeys `yaml:"key_groups"`
	LastModified   string     `yaml:"lastmodified"`
	MAC            string     `yaml:"mac"`
	MACOnlyEncrypt bool       `yaml:"mac_only_encrypted"`
	UnencSuffix    string     `yaml:"unencrypted_suffix"`
	EncSuffix      string     `yaml:"encrypted_suffix"`
	UnencRegex     string     `yaml:"unencrypted_regex"`
	EncRegex       string     `yaml:"encrypted_regex"`
	UnencCommentRE string     `yaml:"unencrypted_comment_regex"`
	EncCommentRE   string     `yaml:"encrypted_comment_regex"`

	unencRE, encRE *regexp.Regexp
}

// sopsMACOnlyEncryptedInit starts the MAC when mac_only_encrypted is set
// (sha256("sops"), as sops has it).
var sopsMACOnlyEncryptedInit = []byte{0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0xb, 0xb, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69}

var sopsValueRE = regexp.MustCompile(`^ENC\[AES256_GCM,data:(.+),iv:(.+),tag:(.+),type:(.+)\]`)

// sopsMetadataNode finds the top-level `sops` mapping of a document: its
// index in the root mapping's Content and the mapping itself.
func sopsMetadataNode(doc *yaml.Node) (int, *yaml.Node) {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return -1, nil
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "sops" && v.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(v.Content); j += 2 {
				if name := v.Content[j].Value; name == "mac" || name == "lastmodified" {
					return i, v
				}
			}
		}
	}
	return -1, nil
}

// decryptSOPS decrypts a sops YAML document in place (values only, in
// memory) and verifies its MAC; the `sops` key is removed.
func decryptSOPS(path string, doc *yaml.Node, a AgeIdentities) error {
	fail := func(noID bool, reason string) error {
		return &DecryptError{Path: path, Format: FormatSOPS, Reason: reason, NoIdentity: noID}
	}
	at, metaNode := sopsMetadataNode(doc)
	var meta sopsMeta
	if err := metaNode.Decode(&meta); err != nil {
		return fail(false, fmt.Sprintf("its sops metadata (line %d) does not decode%s: restore the file from Git, or re-encrypt it with sops", metaNode.Line, yamlErrorLine(err)))
	}
	if err := meta.compileRules(); err != nil {
		return fail(false, err.Error())
	}
	keys, err := meta.ageKeys()
	if err != nil {
		return fail(false, err.Error())
	}
	set, err := a.load()
	if err != nil {
		return fail(true, err.Error())
	}
	if len(set.ids) == 0 {
		return fail(true, "no age identity is set: "+a.nextStep())
	}
	dataKey, damaged, err := sopsDataKey(keys, set, a.nextStep())
	if err != nil {
		return fail(!damaged, err.Error())
	}
	defer clear(dataKey)

	root := doc.Content[0]
	root.Content = append(root.Content[:at:at], root.Content[at+2:]...)
	h := sha512.New()
	if meta.MACOnlyEncrypt {
		h.Write(sopsMACOnlyEncryptedInit)
	}
	if err := meta.walk(root, nil, dataKey, h); err != nil {
		return fail(false, err.Error())
	}
	mac := fmt.Sprintf("%X", h.Sum(nil))

	lm, err := time.Parse(time.RFC3339, meta.LastModified)
	if err != nil {
		return fail(false, fmt.Sprintf("its sops.lastmodified (line %d) is not an RFC 3339 time, so its MAC cannot be checked: restore the file from Git, or re-encrypt it with sops", metaNode.Line))
	}
	stored, _, err := sopsOpen(meta.MAC, dataKey, lm.Format(time.RFC3339))
	if err != nil || subtle.ConstantTimeCompare([]byte(stored), []byte(mac)) != 1 {
		return fail(false, "its MAC does not verify: the file was changed without sops, or damaged. Restore it from Git, or edit it only with `sops`")
	}
	return nil
}

func (m *sopsMeta) compileRules() error {
	if m.UnencCommentRE != "" || m.EncCommentRE != "" {
		return errors.New("it uses sops' comment rules (encrypted_comment_regex or unencrypted_comment_regex), which devata does not read: re-encrypt it without them")
	}
	rules := 0
	for _, r := range []string{m.UnencSuffix, m.EncSuffix, m.UnencRegex, m.EncRegex} {
		if r != "" {
			rules++
		}
	}
	switch {
	case rules > 1:
		return errors.New("its sops metadata sets more than one of encrypted_suffix, unencrypted_suffix, encrypted_regex, unencrypted_regex, which sops refuses too: re-encrypt it with one rule")
	case rules == 0:
		m.UnencSuffix = "_unencrypted" // sops' default
	}
	var err error
	if m.UnencRegex != "" {
		if m.unencRE, err = regexp.Compile(m.UnencRegex); err != nil {
			return errors.New("its sops.unencrypted_regex does not compile: re-encrypt it with a valid rule")
		}
	}
	if m.EncRegex != "" {
		if m.encRE, err = regexp.Compile(m.EncRegex); err != nil {
			return errors.New("its sops.encrypted_regex does not compile: re-encrypt it with a valid rule")
		}
	}
	return nil
}

// ageKeys is the age-wrapped data keys of the one key group.
func (m *sopsMeta) ageKeys() ([]sopsAgeKey, error) {
	keys := m.Age
	switch {
	case len(m.KeyGroups) > 1:
		return nil, fmt.Errorf("it splits its data key over %d key groups (Shamir), which devata does not combine: re-encrypt it with one group of age recipients", len(m.KeyGroups))
	case len(m.KeyGroups) == 1:
		keys = m.KeyGroups[0].Age
	}
	if len(keys) == 0 {
		other := m.others()
		if len(m.KeyGroups) == 1 {
			other = m.KeyGroups[0].others()
		}
		if other > 0 {
			return nil, errors.New("its data key is wrapped only for key services other than age (KMS, PGP, Vault…), which devata does not call: add an age recipient with `sops updatekeys` (listed in .sops.yaml)")
		}
		return nil, errors.New("its sops metadata has no age recipient: re-encrypt it with `sops --encrypt --age RECIPIENT`")
	}
	return keys, nil
}

// sopsDataKey unwraps the data key with the first identity that opens one of
// keys; damaged says every one of them was damaged rather than for others.
func sopsDataKey(keys []sopsAgeKey, set identitySet, next string) (key []byte, damaged bool, err error) {
	broken := 0
	for _, k := range keys {
		r, err := age.Decrypt(armor.NewReader(strings.NewReader(k.Enc)), set.ids...)
		var nomatch *age.NoIdentityMatchError
		if errors.As(err, &nomatch) {
			continue
		}
		if err != nil {
			broken++
			continue
		}
		key, err := io.ReadAll(io.LimitReader(r, 64))
		if err != nil || len(key) != 32 {
			broken++
			continue
		}
		return key, false, nil
	}
	if broken == len(keys) {
		return nil, true, errors.New("none of its sops.age[].enc data keys parses or verifies (damaged): restore it from Git or your backup")
	}
	return nil, false, fmt.Errorf("its data key does not open with the %s (it is wrapped for %d age %s, listed under sops.age): %s", set.describe(), len(keys), plural(len(keys), "recipient", "recipients"), next)
}

// encrypted says whether sops encrypted the value at path (sops'
// shouldBeEncrypted without the comment rules, which compileRules refuses).
func (m *sopsMeta) encrypted(path []string) bool {
	enc := true
	if m.UnencSuffix != "" {
		for _, p := range path {
			if strings.HasSuffix(p, m.UnencSuffix) {
				enc = false
				break
			}
		}
	}
	if m.EncSuffix != "" {
		enc = false
		for _, p := range path {
			if strings.HasSuffix(p, m.EncSuffix) {
				enc = true
				break
			}
		}
	}
	if m.unencRE != nil {
		for _, p := range path {
			if m.unencRE.MatchString(p) {
				enc = false
				break
			}
		}
	}
	if m.encRE != nil {
		enc = false
		for _, p := range path {
			if m.encRE.MatchString(p) {
				enc = true
				break
			}
		}
	}
	return enc
}

// walk decrypts every value under n in document order, feeding the MAC as
// sops does. Errors name the line and key path, never the value.
func (m *sopsMeta) walk(n *yaml.Node, path []string, key []byte, mac io.Writer) error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
				return fmt.Errorf("line %d has a key that is not a string, which sops does not write: restore the file from Git, or re-encrypt it with sops", k.Line)
			}
			if err := m.walk(n.Content[i+1], append(path[:len(path):len(path)], k.Value), key, mac); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			if err := m.walk(item, path, key, mac); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		return m.leaf(n, path, key, mac)
	case yaml.AliasNode:
		return fmt.Errorf("line %d is a YAML alias, which sops does not write: restore the file from Git, or re-encrypt it with sops", n.Line)
	}
	return nil
}

func (m *sopsMeta) leaf(n *yaml.Node, path []string, key []byte, mac io.Writer) error {
	if n.ShortTag() == "!!null" {
		return nil // sops neither encrypts nor MACs a null
	}
	enc := m.encrypted(path)
	where := fmt.Sprintf("line %d (%s)", n.Line, strings.Join(path, "."))
	if !enc {
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("the plain value at %s does not decode", where)
		}
		if !m.MACOnlyEncrypt {
			b, err := sopsBytes(v)
			if err != nil {
				return fmt.Errorf("the plain value at %s is of a kind sops does not write", where)
			}
			_, _ = mac.Write(b) // a hash.Hash never returns an error
		}
		return nil
	}
	if n.ShortTag() != "!!str" {
		return fmt.Errorf("the value at %s is not sops-encrypted (ENC[AES256_GCM,…]) though the file's rules say it should be: restore the file from Git, or re-encrypt it with sops", where)
	}
	if n.Value == "" {
		return nil // sops leaves empty strings as they are; they add nothing to the MAC
	}
	plain, typ, err := sopsOpen(n.Value, key, strings.Join(path, ":")+":")
	if err != nil {
		return fmt.Errorf("the value at %s %v: restore the file from Git, or edit it only with `sops`", where, err)
	}
	var tag string
	var v any
	switch typ {
	case "str", "bytes":
		tag, v = "!!str", plain
	case "int":
		i, err := strconv.Atoi(plain)
		if err != nil {
			return fmt.Errorf("the value at %s is typed int but is not one", where)
		}
		tag, v = "!!int", i
	case "float":
		f, err := strconv.ParseFloat(plain, 64)
		if err != nil {
			return fmt.Errorf("the value at %s is typed float but is not one", where)
		}
		tag, v = "!!float", f
	case "bool":
		b, err := strconv.ParseBool(plain)
		if err != nil {
			return fmt.Errorf("the value at %s is typed bool but is not one", where)
		}
		tag, v = "!!bool", b
		plain = strconv.FormatBool(b)
	case "time":
		var t time.Time
		if err := t.UnmarshalText([]byte(plain)); err != nil {
			return fmt.Errorf("the value at %s is typed time but is not one", where)
		}
		tag, v = "!!timestamp", t
	default:
		return fmt.Errorf("the value at %s has a sops type devata does not read: restore the file from Git, or re-encrypt it with sops", where)
	}
	b, err := sopsBytes(v)
	if err != nil {
		return fmt.Errorf("the value at %s is of a kind sops does not write", where)
	}
	_, _ = mac.Write(b) // a hash.Hash never returns an error
	n.Value, n.Tag, n.Style = plain, tag, 0
	return nil
}

// sopsOpen opens one ENC[AES256_GCM,…] value. Its errors never quote it.
func sopsOpen(value string, key []byte, aad string) (string, string, error) {
	m := sopsValueRE.FindStringSubmatch(value)
	if m == nil {
		return "", "", errors.New("is not sops-encrypted (ENC[AES256_GCM,…])")
	}
	data, err1 := base64.StdEncoding.DecodeString(m[1])
	iv, err2 := base64.StdEncoding.DecodeString(m[2])
	tag, err3 := base64.StdEncoding.DecodeString(m[3])
	if err1 != nil || err2 != nil || err3 != nil || len(iv) == 0 || len(tag) != 16 {
		return "", "", errors.New("is not well-formed sops ciphertext")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return "", "", errors.New("cannot be opened with a data key of this size")
	}
	gcm, err := cipher.NewGCMWithNonceSize(block, len(iv))
	if err != nil {
		return "", "", errors.New("is not well-formed sops ciphertext")
	}
	plain, err := gcm.Open(nil, iv, append(data, tag...), []byte(aad))
	if err != nil {
		return "", "", errors.New("does not verify (changed, moved to another key, or damaged)")
	}
	return string(plain), m[4], nil
}

// sopsBytes is sops' ToBytes: how a value enters the MAC.
func sopsBytes(v any) ([]byte, error) {
	switch v := v.(type) {
	case string:
		return []byte(v), nil
	case int:
		return []byte(strconv.Itoa(v)), nil
	case int64:
		return []byte(strconv.FormatInt(v, 10)), nil
	case uint64:
		return []byte(strconv.FormatUint(v, 10)), nil
	case float64:
		return []byte(strconv.FormatFloat(v, 'f', -1, 64)), nil
	case bool:
		if v {
			return []byte("True"), nil
		}
		return []byte("False"), nil
	case []byte:
		return v, nil
	case time.Time:
		return v.MarshalText()
	}
	return nil, fmt.Errorf("unsupported %T", v)
}
